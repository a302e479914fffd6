/* Every CPython-version difference of the C side lives in this file.
 *
 * Supported: CPython 3.11, 3.12 and 3.13. The frame layout and the unexported helpers we mirror
 * are version-specific, so any other version fails to build instead of misbehaving at run time.
 *
 * Include order matters (see shared/notes/cpython-frame-eval.md section 7): Python.h first,
 * without Py_BUILD_CORE, then the internal headers with Py_BUILD_CORE defined.
 */
#ifndef PYDYNAMO_CPYTHON_COMPAT_H
#define PYDYNAMO_CPYTHON_COMPAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error "pydynamo._C supports CPython 3.11 to 3.13 only; the frame internals must be re-audited for other versions"
#endif
#if PY_VERSION_HEX >= 0x030D0000 && defined(Py_GIL_DISABLED)
#error "pydynamo._C does not support the free-threaded build (3.13t)"
#endif

#define Py_BUILD_CORE
#if PY_VERSION_HEX >= 0x030C0000
/* cpython issue 105268: a macro in cpython/objimpl.h clashes with a function in pycore_gc.h. */
#undef _PyGC_FINALIZED
#endif
#include <internal/pycore_frame.h>
#include <internal/pycore_code.h>
#if PY_VERSION_HEX >= 0x030D0000
#include <internal/pycore_ceval.h> /* _PyEval_FrameClearAndPop (exported from 3.13 on) */
#endif
#undef Py_BUILD_CORE

/* ---- frame fields ---- */
#if PY_VERSION_HEX >= 0x030C0000
#define PYD_FRAME_FUNC(f) ((f)->f_funcobj)
#else
#define PYD_FRAME_FUNC(f) ((PyObject *)(f)->f_func)
#endif

/* The code object. 3.13 renamed f_code to f_executable (a PyObject *: a code object for every
 * frame an eval function receives; None only for the evaluator's own C-stack entry frames). */
#if PY_VERSION_HEX >= 0x030D0000
#define PYD_FRAME_CODE(f) ((PyCodeObject *)(f)->f_executable)
#define PYD_FRAME_HAS_CODE(f) PyCode_Check((f)->f_executable)
#else
#define PYD_FRAME_CODE(f) ((f)->f_code)
#define PYD_FRAME_HAS_CODE(f) 1
#endif

/* A frame that has not executed any instruction yet. 3.11/3.12 keep prev_instr, the unit before
 * the next one (code - 1 at the start, so lasti == -1); 3.13 keeps instr_ptr, the next one
 * (code + 0 at the start, so lasti == 0, which a resumed frame can have too: check the owner). */
#if PY_VERSION_HEX >= 0x030D0000
#define PYD_FRAME_IS_FRESH(f) ((f)->instr_ptr == _PyCode_CODE(PYD_FRAME_CODE(f)))
#else
#define PYD_FRAME_IS_FRESH(f) (_PyInterpreterFrame_LASTI(f) < 0)
#endif

/* ---- code extra slots (renamed PyUnstable_* in 3.12, old names kept as aliases) ---- */
#if PY_VERSION_HEX >= 0x030C0000
#define PYD_RequestCodeExtraIndex PyUnstable_Eval_RequestCodeExtraIndex
#define PYD_Code_GetExtra PyUnstable_Code_GetExtra
#define PYD_Code_SetExtra PyUnstable_Code_SetExtra
#else
#define PYD_RequestCodeExtraIndex _PyEval_RequestCodeExtraIndex
#define PYD_Code_GetExtra _PyCode_GetExtra
#define PYD_Code_SetExtra _PyCode_SetExtra
#endif

/* Who clears a thread-owned frame that the eval function did not evaluate:
 * 3.11: the caller (_PyEval_Vector) does, after the eval function returns: we must not.
 * 3.12+: the callee (the eval function) does: if we do not pass the frame to an evaluator,
 *       we must drop its references and pop it off the thread's data stack ourselves.
 *       3.13 exports the evaluator's own helper for exactly that; 3.12 needs a copy. */
static inline void pyd_release_unevaluated_frame(PyThreadState *tstate, _PyInterpreterFrame *frame)
{
#if PY_VERSION_HEX >= 0x030D0000
    /* Python/ceval.c: clear_thread_frame for thread-owned frames, i.e. _PyFrame_ClearExceptCode
     * (frame object hand-over, localsplus, f_locals, function), the code reference, then
     * _PyThreadState_PopFrame. Needs the frame on top of the data stack, as ours is. */
    _PyEval_FrameClearAndPop(tstate, frame);
#elif PY_VERSION_HEX >= 0x030C0000
    /* Only fresh frames reach here: never linked into the thread's frame chain, so no frame
     * object can exist for them (the hook checks frame_obj == NULL before taking them). */
    for (int i = 0; i < frame->stacktop; i++) {
        Py_XDECREF(frame->localsplus[i]);
    }
    Py_XDECREF(frame->f_locals);
    Py_DECREF(frame->f_funcobj);
    Py_DECREF(frame->f_code);
    /* Pop: the data stack is a list of chunks; a frame at the very start of the current chunk
     * means the chunk was made for it, so the chunk goes back to the arena allocator. */
    PyObject **base = (PyObject **)frame;
    _PyStackChunk *chunk = tstate->datastack_chunk;
    if (base == &chunk->data[0]) {
        _PyStackChunk *prev = chunk->previous;
        tstate->datastack_chunk = prev;
        tstate->datastack_top = &prev->data[prev->top];
        tstate->datastack_limit = (PyObject **)(((char *)prev) + prev->size);
        PyObjectArenaAllocator arena;
        PyObject_GetArenaAllocator(&arena);
        arena.free(arena.ctx, chunk, chunk->size);
    } else {
        tstate->datastack_top = base;
    }
#else
    (void)tstate;
    (void)frame;
#endif
}

/* Take / restore the raised exception as one object (3.12's API; 3.11 has the triple). */
#if PY_VERSION_HEX >= 0x030C0000
#define pyd_err_take PyErr_GetRaisedException
#define pyd_err_restore PyErr_SetRaisedException
#else
static inline PyObject *pyd_err_take(void)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    if (t == NULL) return NULL;
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb != NULL) PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
}
static inline void pyd_err_restore(PyObject *v)
{
    PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(v)), v, PyException_GetTraceback(v));
}
#endif

/* The object a weak reference points to, borrowed, or Py_None once it died (guards only compare
 * it by identity). 3.13 deprecates PyWeakref_GET_OBJECT because a borrowed result is unsafe in
 * the free-threaded build, which we refuse above; with the GIL it stays exact and inline, where
 * its replacement PyWeakref_GetRef is an out-of-line call plus an incref/decref pair on the hit
 * path. */
#if PY_VERSION_HEX >= 0x030D0000 && (defined(__GNUC__) || defined(__clang__))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static inline PyObject *pyd_weakref_target(PyObject *ref) { return PyWeakref_GET_OBJECT(ref); }
#pragma GCC diagnostic pop
#else
#define pyd_weakref_target PyWeakref_GET_OBJECT
#endif

/* The data stack top, for the leak tests. */
static inline void *pyd_datastack_top(PyThreadState *tstate) { return (void *)tstate->datastack_top; }

#endif
