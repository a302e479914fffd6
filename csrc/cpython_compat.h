/* Every CPython-version difference of the C side lives in this file.
 *
 * Supported: CPython 3.11 and 3.12. The frame layout and the unexported helpers we mirror are
 * version-specific, so any other version fails to build instead of misbehaving at run time.
 *
 * Include order matters (see shared/notes/cpython-frame-eval.md section 7): Python.h first,
 * without Py_BUILD_CORE, then the internal headers with Py_BUILD_CORE defined.
 */
#ifndef PYDYNAMO_CPYTHON_COMPAT_H
#define PYDYNAMO_CPYTHON_COMPAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030D0000
#error "pydynamo._C supports CPython 3.11 and 3.12 only; the frame internals must be re-audited for other versions"
#endif

#define Py_BUILD_CORE
#if PY_VERSION_HEX >= 0x030C0000
/* cpython issue 105268: a macro in cpython/objimpl.h clashes with a function in pycore_gc.h. */
#undef _PyGC_FINALIZED
#endif
#include <internal/pycore_frame.h>
#include <internal/pycore_code.h>
#undef Py_BUILD_CORE

/* ---- frame fields ---- */
#if PY_VERSION_HEX >= 0x030C0000
#define PYD_FRAME_FUNC(f) ((f)->f_funcobj)
#else
#define PYD_FRAME_FUNC(f) ((PyObject *)(f)->f_func)
#endif
#define PYD_FRAME_CODE(f) ((f)->f_code)

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
 * 3.12: the callee (the eval function) does: if we do not pass the frame to an evaluator,
 *       we must drop its references and pop it off the thread's data stack ourselves. */
static inline void pyd_release_unevaluated_frame(PyThreadState *tstate, _PyInterpreterFrame *frame)
{
#if PY_VERSION_HEX >= 0x030C0000
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

/* The data stack top, for the leak tests. */
static inline void *pyd_datastack_top(PyThreadState *tstate) { return (void *)tstate->datastack_top; }

#endif
