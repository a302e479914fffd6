"""Feature family about torch's process-wide flags: bodies that read them (deterministic algorithms
and warn_only, anomaly mode, the float32 matmul precision and TF32 switches, cuDNN / oneDNN / SDPA
flags, the profiler, the default device, warn_always, the thread count) and branch on them, and
mutations that switch them between calls, so each read must be guarded (and a backend that
compiles them in must be given the graph again). check.run_side puts every flag back after a
program (flags_state / restore_flags). See families_tensor.py for the conventions (x a tensor, n a
Python scalar, c the argument dict).
"""
from .program import pick

# h: a small float view of x that matmul takes (x may be int, bool or complex)
_H = "h = x.reshape(-1)[:4]\nh = (h.real if h.is_complex() else h).detach().to(torch.float32)\n"


def fam_flags(rng, s, place):
    pick(rng, s, [
        "if torch.are_deterministic_algorithms_enabled():\n    out.append(x * 2)\nelse:\n    out.append(x + 1)",
        "out.append(torch.is_deterministic_algorithms_warn_only_enabled())\n"
        "out.append(torch.utils.deterministic.fill_uninitialized_memory)",
        "if torch.is_anomaly_enabled():\n    x = x + 1\nout.append(x)\nout.append(torch.is_anomaly_check_nan_enabled())",
        "if torch.get_float32_matmul_precision() != 'highest':\n    out.append('reduced')\n" + _H + "out.append(h @ h)",
        "if torch.backends.cuda.matmul.allow_tf32:\n    out.append('tf32')\nout.append(x * 1)",
        "out.append(torch.backends.cudnn.allow_tf32)\nout.append(torch.backends.cudnn.benchmark)\n"
        "out.append(torch._C._get_cudnn_allow_tf32())",
        "if torch.backends.mkldnn.enabled:\n    out.append(x - 1)\nout.append(torch._C._get_mkldnn_enabled())",
        "out.append(torch.backends.cuda.flash_sdp_enabled())\nout.append(torch.backends.cuda.math_sdp_enabled())",
        "if torch.autograd._profiler_enabled():\n    out.append('profiling')\nout.append(x + n)",
        "out.append(torch.get_default_device())\nout.append(torch.ones(2).device)",
        "out.append(torch.is_warn_always_enabled())\nout.append(torch.get_num_threads() > 1)",
        _H + "out.append(torch.mm(h.reshape(2, 2), h.reshape(2, 2)))\nout.append(torch.index_add(h, 0, "
        "torch.tensor([0, 0]), torch.ones(2)))",
        "if torch._C._get_deterministic_algorithms():\n    out.append(torch.empty(2).isnan().any())\nout.append(x)",
    ])
    s.mut("torch.use_deterministic_algorithms(True)", "torch.use_deterministic_algorithms(False)",
          "torch.use_deterministic_algorithms(True, warn_only=True)",
          "torch.utils.deterministic.fill_uninitialized_memory = False",
          "torch.autograd.set_detect_anomaly(True)", "torch.autograd.set_detect_anomaly(False)",
          "torch.set_float32_matmul_precision('high')", "torch.set_float32_matmul_precision('highest')",
          "torch.backends.cuda.matmul.allow_tf32 = True", "torch.backends.cudnn.allow_tf32 = False",
          "torch.backends.cudnn.benchmark = True", "torch.backends.mkldnn.enabled = False",
          "torch.backends.mkldnn.enabled = True", "torch.backends.cuda.enable_flash_sdp(False)",
          "torch.set_warn_always(True)", "torch.set_default_device('cpu')", "torch.set_default_device(None)",
          "torch.set_num_threads(1)")


def flags_state():
    """The flags fam_flags switches, as they are now (check.run_side, before a program)."""
    import torch
    cudnn = torch.backends.cudnn
    return dict(det=(torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
                fill=torch.utils.deterministic.fill_uninitialized_memory,
                anomaly=(torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
                precision=torch.get_float32_matmul_precision(), tf32=torch.backends.cuda.matmul.allow_tf32,
                cudnn=(cudnn.allow_tf32, cudnn.benchmark), mkldnn=torch.backends.mkldnn.enabled,
                flash=torch.backends.cuda.flash_sdp_enabled(), warn_always=torch.is_warn_always_enabled(),
                threads=torch.get_num_threads())


def restore_flags(saved):
    """Put back what flags_state() returned, and no default device (after a program)."""
    import torch
    torch.use_deterministic_algorithms(saved["det"][0], warn_only=saved["det"][1])
    torch.utils.deterministic.fill_uninitialized_memory = saved["fill"]
    torch.autograd.set_detect_anomaly(*saved["anomaly"])
    torch.set_float32_matmul_precision(saved["precision"])
    torch.backends.cuda.matmul.allow_tf32 = saved["tf32"]
    torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = saved["cudnn"]
    torch.backends.mkldnn.enabled = saved["mkldnn"]
    torch.backends.cuda.enable_flash_sdp(saved["flash"])
    torch.set_warn_always(saved["warn_always"])
    torch.set_num_threads(saved["threads"])
    torch.set_default_device(None)
