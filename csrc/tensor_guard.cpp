// The fast TENSOR_MATCH (see tensor_guard.h): reads a tensor's metadata straight from its
// TensorImpl instead of through Python getters that allocate a device object, a torch.Size and a
// strides tuple per check. Built only against the torch it will run with (checked at import).
#include <Python.h>

#include <algorithm>
#include <vector>

#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Layout.h>
#include <torch/csrc/autograd/python_variable.h>

extern "C" {
#include "tensor_guard.h"
}

namespace {

int encode(PyObject *type, PyObject *dtype, PyObject *device, PyObject *layout, PydFastTensorSpec *spec) {
  // check() reads objects of exactly `type` as THPVariable: it must be a torch tensor type
  if (!PyType_Check(type) || THPVariableClass == nullptr ||
      !PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(type), reinterpret_cast<PyTypeObject *>(THPVariableClass))) {
    PyErr_SetString(PyExc_TypeError, "TENSOR_MATCH: not a torch tensor type");
    return -1;
  }
  if (!THPDtype_Check(dtype) || !THPDevice_Check(device) || !THPLayout_Check(layout)) {
    PyErr_SetString(PyExc_TypeError, "TENSOR_MATCH: expected torch.dtype, torch.device and torch.layout");
    return -1;
  }
  spec->dtype = static_cast<int32_t>(reinterpret_cast<THPDtype *>(dtype)->scalar_type);
  const c10::Device &d = reinterpret_cast<THPDevice *>(device)->device;
  spec->device_type = static_cast<int32_t>(d.type());
  spec->device_index = d.has_index() ? d.index() : -1;
  spec->layout = static_cast<int32_t>(reinterpret_cast<THPLayout *>(layout)->layout);
  return 0;
}

bool same_ints(c10::IntArrayRef have, const int64_t *want, Py_ssize_t n) {
  if (static_cast<Py_ssize_t>(have.size()) != n) return false;
  for (Py_ssize_t i = 0; i < n; i++)
    if (want[i] != INT64_MIN && have[i] != want[i]) return false;
  return true;
}

// The PYD_TENSOR_* bits of `t`: bit tests on the TensorImpl's dispatch key set (inline), and
// requires_grad (the call t.requires_grad() makes).
int32_t flags_of(const at::Tensor &t) {
  c10::TensorImpl *impl = t.unsafeGetTensorImpl();
  return (impl->requires_grad() ? PYD_TENSOR_REQUIRES_GRAD : 0) | (impl->is_inference() ? PYD_TENSOR_INFERENCE : 0) |
         (impl->is_conj() ? PYD_TENSOR_CONJ : 0) | (impl->is_neg() ? PYD_TENSOR_NEG : 0);
}

const char *flag_name(int32_t bits) {
  if (bits & PYD_TENSOR_REQUIRES_GRAD) return "requires_grad";
  if (bits & PYD_TENSOR_INFERENCE) return "inference";
  if (bits & PYD_TENSOR_CONJ) return "conj";
  return "neg";
}

int check(PyObject *obj, const PydFastTensorSpec *spec, const int64_t *sizes, const int64_t *strides,
          Py_ssize_t ndim, const char **detail) {
  try {
    const at::Tensor &t = THPVariable_Unpack(obj);
    if (static_cast<int32_t>(t.scalar_type()) != spec->dtype) { *detail = "dtype"; return 0; }
    const c10::Device d = t.device();
    if (static_cast<int32_t>(d.type()) != spec->device_type ||
        (d.has_index() ? d.index() : -1) != spec->device_index) { *detail = "device"; return 0; }
    if (static_cast<int32_t>(t.layout()) != spec->layout) { *detail = "layout"; return 0; }
    const int32_t differ = flags_of(t) ^ spec->flags;
    if (differ != 0) { *detail = flag_name(differ); return 0; }
    if (!same_ints(t.sizes(), sizes, ndim)) { *detail = "size"; return 0; }
    if (!same_ints(t.strides(), strides, ndim)) { *detail = "stride"; return 0; }
    return 1;
  } catch (...) {
    return -1;
  }
}

PydTensorGuardAPI api = {PYD_TENSOR_GUARD_API_VERSION, encode, check};

// overlapping_pairs(values, changed, other_range) -> frozenset of (i, j), i < j: the pairs of
// values whose memory ranges intersect, where `changed` (a set of indices) holds i or j. A
// tensor's range is its storage's bytes; any other value's is other_range(v) (None or
// (start, end)). guards.py's MemoryOverlap calls it at every check of a graph that changes
// inputs in place, so the tensors (often a model's every buffer) are read here, not in Python.
PyObject *overlapping_pairs(PyObject *, PyObject *args) {
  PyObject *values, *changed, *other_range;
  if (!PyArg_ParseTuple(args, "O!OO", &PyTuple_Type, &values, &changed, &other_range)) return nullptr;
  struct Range { uintptr_t start, end; Py_ssize_t index; };
  std::vector<Range> ranges;
  const Py_ssize_t n = PyTuple_GET_SIZE(values);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *v = PyTuple_GET_ITEM(values, i);
    if (v == Py_None) continue;
    if (THPVariable_Check(v)) {
      try {
        const at::Tensor &t = THPVariable_Unpack(v);
        if (t.device().is_meta() || !t.has_storage()) continue;
        const c10::Storage &st = t.storage();
        const auto start = reinterpret_cast<uintptr_t>(st.data());
        const size_t nbytes = st.nbytes();
        if (nbytes) ranges.push_back({start, start + nbytes, i});
      } catch (...) {
        PyErr_SetString(PyExc_RuntimeError, "overlapping_pairs: a tensor's storage could not be read");
        return nullptr;
      }
      continue;
    }
    PyObject *r = PyObject_CallOneArg(other_range, v);
    if (r == nullptr) return nullptr;
    if (r != Py_None) {
      unsigned long long lo, hi;
      if (!PyArg_ParseTuple(r, "KK", &lo, &hi)) { Py_DECREF(r); return nullptr; }
      if (hi > lo) ranges.push_back({static_cast<uintptr_t>(lo), static_cast<uintptr_t>(hi), i});
    }
    Py_DECREF(r);
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range &a, const Range &b) { return a.start < b.start; });
  PyObject *pairs = PySet_New(nullptr);
  if (pairs == nullptr) return nullptr;
  for (size_t k = 0; k < ranges.size(); k++) {
    for (size_t l = k + 1; l < ranges.size() && ranges[l].start < ranges[k].end; l++) {
      Py_ssize_t i = std::min(ranges[k].index, ranges[l].index), j = std::max(ranges[k].index, ranges[l].index);
      PyObject *pi = PyLong_FromSsize_t(i), *pj = PyLong_FromSsize_t(j);
      int ci = pi ? PySequence_Contains(changed, pi) : -1, cj = pj ? PySequence_Contains(changed, pj) : -1;
      PyObject *pair = (ci > 0 || cj > 0) ? PyTuple_Pack(2, pi, pj) : nullptr;
      Py_XDECREF(pi);
      Py_XDECREF(pj);
      if (ci < 0 || cj < 0 || ((ci > 0 || cj > 0) && (pair == nullptr || PySet_Add(pairs, pair) < 0))) {
        Py_XDECREF(pair);
        Py_DECREF(pairs);
        return nullptr;
      }
      Py_XDECREF(pair);
    }
  }
  PyObject *frozen = PyFrozenSet_New(pairs);
  Py_DECREF(pairs);
  return frozen;
}

PyMethodDef methods[] = {
    {"overlapping_pairs", overlapping_pairs, METH_VARARGS,
     "overlapping_pairs(values, changed, other_range): pairs (i, j) of values sharing memory, one changed."},
    {nullptr, nullptr, 0, nullptr}};

struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "pydynamo._tensor_guard",
                                 "Fast TENSOR_MATCH for pydynamo._C (built against one torch version).", -1,
                                 methods};

}  // namespace

PyMODINIT_FUNC PyInit__tensor_guard(void) {
  // Refuse to load against another torch than the one whose headers it was built with: the
  // struct layouts read above are that version's.
  PyObject *torch = PyImport_ImportModule("torch");
  if (torch == nullptr) return nullptr;
  PyObject *version = PyObject_GetAttrString(torch, "__version__");
  Py_DECREF(torch);
  if (version == nullptr) return nullptr;
  const char *v = PyUnicode_AsUTF8(version);
  bool same = v != nullptr && std::string(v) == PYD_TORCH_VERSION;
  Py_DECREF(version);
  if (!same) {
    PyErr_Format(PyExc_ImportError, "pydynamo._tensor_guard was built for torch %s", PYD_TORCH_VERSION);
    return nullptr;
  }
  PyObject *m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  PyObject *cap = PyCapsule_New(&api, PYD_TENSOR_GUARD_CAPSULE, nullptr);
  if (cap == nullptr || PyModule_AddObject(m, "_api", cap) < 0) {
    Py_XDECREF(cap);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
