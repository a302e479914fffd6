/* The PEP 523 frame-evaluation hook: per-thread settings, chaining, the hit path in C.
 *
 * The protocol seen from Python is documented in pydynamo/_C.pyi. Reference notes on the CPython
 * internals used here: shared/notes/cpython-frame-eval.md.
 */
#include "cache.h"
#include "guards.h"
#include <structmember.h>

/* ---------------------------------------------------------------- per-thread state */

typedef struct {
    PyObject *setting; /* NULL (off), Py_False (run-only) or a callable (strong reference) */
    int busy;          /* > 0 while a callback or guards run: frames started then run normally */
    int probe_seen;    /* set when the hook sees the probe function's frame */
    PyObject *key;     /* the setting's cache_key (borrowed from key_cached), or NULL: entries compiled
                          under another key are not this setting's to serve (another backend or options) */
    PyObject *key_of, *key_cached; /* a weak reference to the last setting whose key was read, and
                                      that key (strong): the setting itself is not kept alive */
    _PyInterpreterFrame *passing;  /* the frame we handed to the evaluator below us (see run_normally) */
} ThreadState;

static _Thread_local ThreadState tls;

/* ---------------------------------------------------------------- installation */

static _PyFrameEvalFunction prev_eval = NULL; /* what we chain to; NULL = the default evaluator */
static int installed = 0;                      /* we put ourselves in the interpreter's slot */
static Py_ssize_t active_threads = 0;          /* threads whose setting is not None */
static PyCodeObject *probe_code = NULL;        /* see still_in_chain() */
static PyObject *probe_fn = NULL;
static PyObject *skip_marker = NULL;           /* _C.SKIP */
static PyObject *key_attr = NULL;              /* "cache_key" */
static PyObject *error_handler = NULL;
static Py_ssize_t n_reinstalls = 0, n_hits = 0, n_misses = 0, n_callbacks = 0;

static PyObject *pyd_eval_frame(PyThreadState *, _PyInterpreterFrame *, int);

/* The evaluator below us may chain back to us (torch._dynamo's shim, installed below us and
 * then again above us, chains to whatever it found when it switched on): the same frame coming
 * back while we pass it down is evaluated by CPython itself, which ends the cycle. */
static inline PyObject *run_normally(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    if (prev_eval == NULL || frame == tls.passing) return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
    _PyInterpreterFrame *saved = tls.passing;
    tls.passing = frame;
    PyObject *r = prev_eval(tstate, frame, throwflag);
    tls.passing = saved;
    return r;
}

static void install(PyInterpreterState *interp, _PyFrameEvalFunction current)
{
    prev_eval = current == _PyEval_EvalFrameDefault ? NULL : current;
    _PyInterpreterState_SetEvalFrameFunc(interp, pyd_eval_frame);
    installed = 1;
}

/* Someone else's eval function is installed above us. If it chains to us (torch._dynamo does
 * when it was switched on after us), every frame still reaches our hook. If it replaced us
 * (torch._dynamo restores the function it saw when it switched on, blindly), none does. Calling
 * a tiny Python function tells the two apart for certain. */
static int still_in_chain(void)
{
    tls.probe_seen = 0;
    int busy = tls.busy;
    tls.busy = 0;
    PyObject *r = PyObject_CallNoArgs(probe_fn);
    tls.busy = busy;
    if (r == NULL) PyErr_Clear();
    Py_XDECREF(r);
    return tls.probe_seen;
}

static void update_installation(void)
{
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction current = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (active_threads > 0) {
        if (current == pyd_eval_frame) return;
        if (!installed) {
            install(interp, current);
        } else if (!still_in_chain()) {
            install(interp, current);
            n_reinstalls++;
        }
    } else if (installed && current == pyd_eval_frame) {
        _PyInterpreterState_SetEvalFrameFunc(interp, prev_eval ? prev_eval : _PyEval_EvalFrameDefault);
        prev_eval = NULL;
        installed = 0;
    }
    /* else: someone installed over us and may chain to us; we stay a pass-through in the chain. */
}

/* ---------------------------------------------------------------- Frame: the callback's view */

typedef struct {
    PyObject_HEAD
    _PyInterpreterFrame *frame; /* borrowed; NULL once the callback has returned */
    PyObject *locals;           /* cached f_locals dict */
} FrameObject;

static PyTypeObject PydFrame_Type;

static _PyInterpreterFrame *frame_of(FrameObject *self)
{
    if (self->frame == NULL) PyErr_SetString(PyExc_RuntimeError, "pydynamo Frame used after its callback returned");
    return self->frame;
}

static PyObject *func_closure(_PyInterpreterFrame *f)
{
    PyObject *c = ((PyFunctionObject *)PYD_FRAME_FUNC(f))->func_closure;
    return c ? c : Py_None;
}

static PyObject *Frame_get(FrameObject *self, void *which)
{
    _PyInterpreterFrame *f = frame_of(self);
    if (f == NULL) return NULL;
    switch ((intptr_t)which) {
    case 0: return Py_NewRef((PyObject *)PYD_FRAME_CODE(f));
    case 1: return Py_NewRef(f->f_globals);
    case 2: return Py_NewRef(f->f_builtins);
    case 3: return Py_NewRef(PYD_FRAME_FUNC(f));
    case 4: return Py_NewRef(func_closure(f));
    case 5: return PyLong_FromLong(PYD_FRAME_CODE(f)->co_firstlineno);
    }
    Py_RETURN_NONE;
}

/* Arguments (cell arguments hold their raw value at entry) and the closure's contents, by name. */
static PyObject *frame_locals_dict(_PyInterpreterFrame *f)
{
    PyCodeObject *co = PYD_FRAME_CODE(f);
    PyObject *d = PyDict_New();
    if (d == NULL) return NULL;
    int nfree = co->co_nfreevars, first_free = co->co_nlocalsplus - nfree;
    for (int i = 0; i < first_free; i++) {
        PyObject *v = f->localsplus[i];
        if (v && PyDict_SetItem(d, PyTuple_GET_ITEM(co->co_localsplusnames, i), v) < 0) goto fail;
    }
    PyObject *closure = ((PyFunctionObject *)PYD_FRAME_FUNC(f))->func_closure;
    for (int j = 0; closure && j < nfree; j++) {
        PyObject *v = PyCell_GET(PyTuple_GET_ITEM(closure, j));
        if (v && PyDict_SetItem(d, PyTuple_GET_ITEM(co->co_localsplusnames, first_free + j), v) < 0) goto fail;
    }
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static PyObject *Frame_f_locals(FrameObject *self, void *unused)
{
    _PyInterpreterFrame *f = frame_of(self);
    if (f == NULL) return NULL;
    if (self->locals == NULL) self->locals = frame_locals_dict(f);
    return Py_XNewRef(self->locals);
}

static void guard_ctx_of(_PyInterpreterFrame *f, PydGuardCtx *ctx)
{
    PyObject *closure = ((PyFunctionObject *)PYD_FRAME_FUNC(f))->func_closure;
    ctx->locals = f->localsplus;
    ctx->nlocals = PYD_FRAME_CODE(f)->co_nlocalsplus - PYD_FRAME_CODE(f)->co_nfreevars;
    ctx->globals = f->f_globals;
    ctx->builtins = f->f_builtins;
    ctx->closure = closure;
}

/* Frame.check_guards(guardset) -> None if every check holds, else the first failure's text. */
static PyObject *Frame_check_guards(FrameObject *self, PyObject *gs)
{
    _PyInterpreterFrame *f = frame_of(self);
    if (f == NULL) return NULL;
    if (!PyObject_TypeCheck(gs, &PydGuardSet_Type)) {
        PyErr_SetString(PyExc_TypeError, "check_guards needs a GuardSet");
        return NULL;
    }
    PydGuardCtx ctx;
    guard_ctx_of(f, &ctx);
    PyObject *why = NULL;
    tls.busy++;
    int ok = pyd_guardset_check(gs, &ctx, &why);
    tls.busy--;
    if (ok || why == NULL) Py_RETURN_NONE;
    return why;
}

static PyObject *Frame_repr(FrameObject *self)
{
    if (self->frame == NULL) return PyUnicode_FromString("<pydynamo Frame (finished)>");
    return PyUnicode_FromFormat("<pydynamo Frame of %R>", PYD_FRAME_CODE(self->frame));
}

static void Frame_dealloc(FrameObject *self)
{
    Py_XDECREF(self->locals);
    PyObject_Free(self);
}

static PyGetSetDef Frame_getset[] = {
    {"f_code", (getter)Frame_get, NULL, "the code object", (void *)0},
    {"f_globals", (getter)Frame_get, NULL, "the globals dict", (void *)1},
    {"f_builtins", (getter)Frame_get, NULL, "the builtins dict", (void *)2},
    {"f_func", (getter)Frame_get, NULL, "the function being called", (void *)3},
    {"closure", (getter)Frame_get, NULL, "the function's closure tuple, or None", (void *)4},
    {"f_lineno", (getter)Frame_get, NULL, "the first line of the code", (void *)5},
    {"f_locals", (getter)Frame_f_locals, NULL, "arguments and closure contents by name", NULL},
    {NULL},
};

static PyMethodDef Frame_methods[] = {
    {"check_guards", (PyCFunction)Frame_check_guards, METH_O,
     "check_guards(guardset) -> None if all hold on this frame, else the first failing check's text"},
    {NULL},
};

static PyTypeObject PydFrame_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pydynamo._C.Frame",
    .tp_basicsize = sizeof(FrameObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The frame being evaluated, as the callback sees it; valid only during the callback.",
    .tp_dealloc = (destructor)Frame_dealloc,
    .tp_repr = (reprfunc)Frame_repr,
    .tp_getset = Frame_getset,
    .tp_methods = Frame_methods,
};

/* ---------------------------------------------------------------- the hit path */

static int entry_matches(CacheEntryObject *e, _PyInterpreterFrame *f)
{
    int ok;
    tls.busy++;
    if (PyObject_TypeCheck(e->guards, &PydGuardSet_Type)) {
        PydGuardCtx ctx;
        guard_ctx_of(f, &ctx);
        ok = pyd_guardset_check(e->guards, &ctx, NULL);
    } else { /* a plain Python guard callable, for development and debugging */
        PyObject *locals = frame_locals_dict(f);
        PyObject *r = locals ? PyObject_CallOneArg(e->guards, locals) : NULL;
        ok = r ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
        Py_XDECREF(locals);
        if (ok < 0) { PyErr_Clear(); ok = 0; }
    }
    tls.busy--;
    return ok;
}

/* Whether this thread's setting may be served by the entry: it was compiled under the same
 * cache_key (backend and the options that change what is compiled), or the setting is run-only. */
static inline int key_matches(CacheEntryObject *e)
{
    return e->key == tls.key || tls.setting == Py_False;
}

static int key_skipped(ExtraState *st)
{
    if (st->skip_keys == NULL || tls.key == NULL) return 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(st->skip_keys); i++)
        if (PyList_GET_ITEM(st->skip_keys, i) == tls.key) return 1;
    return 0;
}

/* New reference to the first entry (of this setting's key) whose guards hold, or NULL. */
static CacheEntryObject *lookup(ExtraState *st, _PyInterpreterFrame *f)
{
    PyObject *entries = st->entries;
    if (entries == NULL) return NULL;
    Py_INCREF(entries); /* guards may run Python code, which may reset or extend the cache */
    CacheEntryObject *found = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); i++) {
        CacheEntryObject *e = (CacheEntryObject *)PyList_GET_ITEM(entries, i);
        if (!key_matches(e)) continue;
        Py_INCREF(e);
        if (entry_matches(e, f)) { found = e; break; }
        Py_DECREF(e);
    }
    Py_DECREF(entries);
    return found;
}

#define SMALL_ARGS 16

/* Call the entry's code as a function with the frame's arguments, then release the frame. The
 * frame's argument slots are read in place: positional, then *args expanded, then keyword-only
 * and **kwargs by name. Defaults were applied before the hook ran. */
static PyObject *run_entry(PyThreadState *tstate, _PyInterpreterFrame *f, CacheEntryObject *e)
{
    PyCodeObject *co = PYD_FRAME_CODE(f);
    PyObject **slots = f->localsplus, *result = NULL, *kwnames = NULL;
    PyObject *fn = PyFunction_New(e->code, f->f_globals);
    if (fn == NULL) goto done;
    PyObject *closure = ((PyFunctionObject *)PYD_FRAME_FUNC(f))->func_closure;
    if (closure && PyFunction_SetClosure(fn, closure) < 0) goto done;

    int npos = co->co_argcount, nkwonly = co->co_kwonlyargcount, i = npos + nkwonly;
    PyObject *varargs = (co->co_flags & CO_VARARGS) ? slots[i++] : NULL;
    PyObject *varkw = (co->co_flags & CO_VARKEYWORDS) ? slots[i++] : NULL;
    Py_ssize_t nvar = varargs ? PyTuple_GET_SIZE(varargs) : 0;
    Py_ssize_t nkw = nkwonly + (varkw ? PyDict_GET_SIZE(varkw) : 0);
    Py_ssize_t total = npos + nvar + nkw;
    PyObject *small[SMALL_ARGS + 1], **argv = small;
    if (total > SMALL_ARGS && (argv = PyMem_Malloc((total + 1) * sizeof(PyObject *))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    /* argv[0] is scratch space, so PY_VECTORCALL_ARGUMENTS_OFFSET lets the callee use it. */
    PyObject **a = argv + 1;
    for (int k = 0; k < npos; k++) *a++ = slots[k];
    for (Py_ssize_t k = 0; k < nvar; k++) *a++ = PyTuple_GET_ITEM(varargs, k);
    if (nkw) {
        if ((kwnames = PyTuple_New(nkw)) == NULL) goto free_argv;
        for (int k = 0; k < nkwonly; k++) {
            PyTuple_SET_ITEM(kwnames, k, Py_NewRef(PyTuple_GET_ITEM(co->co_localsplusnames, npos + k)));
            *a++ = slots[npos + k];
        }
        Py_ssize_t pos = 0, k = nkwonly;
        PyObject *key, *value;
        while (varkw && PyDict_Next(varkw, &pos, &key, &value)) {
            PyTuple_SET_ITEM(kwnames, k++, Py_NewRef(key));
            *a++ = value;
        }
    }
    result = PyObject_Vectorcall(fn, argv + 1, (npos + nvar) | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
free_argv:
    if (argv != small) PyMem_Free(argv);
done:
    Py_XDECREF(kwnames);
    Py_XDECREF(fn);
    pyd_release_unevaluated_frame(tstate, f);
    return result;
}

/* ---------------------------------------------------------------- the callback */

/* Hands the raised exception to the error handler. Returns 1, with the exception set again, if
 * the handler answers True: the exception then propagates from the frame (fullgraph=True errors);
 * otherwise 0 with no exception set, and the frame runs eagerly. */
static int report_callback_error(void)
{
    PyObject *exc = pyd_err_take();
    int propagate = 0;
    tls.busy++; /* the handler is Python code too */
    if (error_handler) {
        PyObject *r = PyObject_CallOneArg(error_handler, exc);
        if (r == NULL) PyErr_WriteUnraisable(error_handler);
        propagate = r == Py_True;
        Py_XDECREF(r);
    } else {
        pyd_err_restore(Py_NewRef(exc));
        PyErr_WriteUnraisable(NULL);
    }
    tls.busy--;
    if (propagate) pyd_err_restore(exc);
    else Py_DECREF(exc);
    return propagate;
}

/* New reference to the entry to run now, or NULL to run the frame normally (no exception set),
 * or NULL with *raise set and an exception set: the frame must raise it without running. */
/* Drop the entries whose guards hold an object that has died (a deleted model): they can never
 * hit again, and must not count against the cache-size limit. */
static int drop_dead_entries(ExtraState *st)
{
    if (st == NULL || st->entries == NULL) return 0;
    for (Py_ssize_t i = PyList_GET_SIZE(st->entries) - 1; i >= 0; i--) {
        CacheEntryObject *e = (CacheEntryObject *)PyList_GET_ITEM(st->entries, i);
        if (pyd_guardset_is_dead(e->guards) && PyList_SetSlice(st->entries, i, i + 1, NULL) < 0) return -1;
    }
    return 0;
}

static CacheEntryObject *ask_callback(PyObject *callback, _PyInterpreterFrame *f, ExtraState *st, int *raise)
{
    PyCodeObject *co = PYD_FRAME_CODE(f);
    if (drop_dead_entries(st) < 0) goto error;
    Py_ssize_t size = 0; /* the entries of this setting's key */
    for (Py_ssize_t i = 0; st && st->entries && i < PyList_GET_SIZE(st->entries); i++)
        size += key_matches((CacheEntryObject *)PyList_GET_ITEM(st->entries, i));
    FrameObject *fo = PyObject_New(FrameObject, &PydFrame_Type);
    if (fo == NULL) goto error;
    fo->frame = f;
    fo->locals = NULL;
    Py_INCREF(callback);
    n_callbacks++;
    /* Another eval function installed above ours that chains to us (torch._dynamo, inside a
     * torch.compile'd call made by eager code of a compiled frame) would see the callback's own
     * frames first, and compile pydynamo's compiler. For the callback we put ours on top: its
     * frames reach this hook, busy, and run normally. (Frames of other threads meanwhile skip
     * the function above us too, and run uncompiled by it.) */
    PyInterpreterState *interp = PyInterpreterState_Get();
    _PyFrameEvalFunction above = _PyInterpreterState_GetEvalFrameFunc(interp);
    if (above != pyd_eval_frame) _PyInterpreterState_SetEvalFrameFunc(interp, pyd_eval_frame);
    tls.busy++;
    PyObject *r = PyObject_CallFunction(callback, "On", (PyObject *)fo, size);
    tls.busy--;
    if (above != pyd_eval_frame && _PyInterpreterState_GetEvalFrameFunc(interp) == pyd_eval_frame)
        _PyInterpreterState_SetEvalFrameFunc(interp, above);
    Py_DECREF(callback);
    fo->frame = NULL;
    Py_DECREF(fo);
    if (r == NULL) goto error;
    if (r == Py_None) { Py_DECREF(r); return NULL; }
    if (r == skip_marker) {
        Py_DECREF(r);
        ExtraState *s = pyd_extra_get_or_create(co);
        if (s == NULL) goto error;
        if (tls.key == NULL) { s->skip = 1; return NULL; } /* SKIP under a key is that key's */
        if (s->skip_keys == NULL && (s->skip_keys = PyList_New(0)) == NULL) goto error;
        if (PyList_Append(s->skip_keys, tls.key) < 0) goto error;
        return NULL;
    }
    if (!PyObject_TypeCheck(r, &PydCacheEntry_Type) || ((CacheEntryObject *)r)->orig_code != (void *)co) {
        PyErr_Format(PyExc_TypeError, "pydynamo callback must return a CacheEntry for %R, None or SKIP; got %R", co, r);
        Py_DECREF(r);
        goto error;
    }
    if (pyd_extra_add_entry(co, r) < 0) { Py_DECREF(r); goto error; }
    return (CacheEntryObject *)r;
error:
    *raise = report_callback_error();
    return NULL;
}

/* ---------------------------------------------------------------- the hook */

static PyObject *pyd_eval_frame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag)
{
    PyCodeObject *co = PYD_FRAME_CODE(frame);
    PyObject *setting = tls.setting;
    if (frame == tls.passing) return _PyEval_EvalFrameDefault(tstate, frame, throwflag); /* a cycle */
    if (setting == NULL) {
        if (co == probe_code) tls.probe_seen = 1;
        else if (active_threads == 0 && installed) update_installation(); /* someone put us back */
        return run_normally(tstate, frame, throwflag);
    }
    if (co == probe_code) {
        tls.probe_seen = 1;
        return run_normally(tstate, frame, throwflag);
    }
    /* Only fresh calls of plain functions: not a resumed or thrown-into frame, not generator or
     * coroutine code, not module or class bodies, not while we compile or check guards, not
     * frames run by a trace or profile function. */
    if (tls.busy || throwflag || !PYD_FRAME_HAS_CODE(frame) || frame->owner != FRAME_OWNED_BY_THREAD ||
        !PYD_FRAME_IS_FRESH(frame) || frame->frame_obj != NULL || tstate->tracing ||
        (co->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE)) ||
        !(co->co_flags & CO_OPTIMIZED))
        return run_normally(tstate, frame, throwflag);
    ExtraState *st = pyd_extra_get(co);
    if (st && (st->skip || key_skipped(st))) return run_normally(tstate, frame, throwflag);

    CacheEntryObject *e = st ? lookup(st, frame) : NULL;
    if (e == NULL) {
        n_misses++;
        if (setting == Py_False) return run_normally(tstate, frame, throwflag);
        int raise = 0;
        e = ask_callback(setting, frame, pyd_extra_get(co) /* re-read: Python code ran */, &raise);
        if (raise) {
            pyd_release_unevaluated_frame(tstate, frame);
            return NULL;
        }
        if (e == NULL || frame->frame_obj != NULL) {
            Py_XDECREF(e);
            return run_normally(tstate, frame, throwflag);
        }
    } else {
        n_hits++;
        e->hits++;
    }
    PyObject *result = run_entry(tstate, frame, e);
    Py_DECREF(e);
    return result;
}

/* ---------------------------------------------------------------- NoHookCall */

/* NoHookCall(fn): calling it calls fn with this thread's hook off, at the cost of a counter.
 * Compiled graphs are wrapped in it: a backend's runtime (Inductor's launchers, autotuning,
 * generated wrappers) is library code and must never be intercepted or traced. */
typedef struct {
    PyObject_HEAD
    PyObject *fn;
    vectorcallfunc vectorcall;
} NoHookCallObject;

static PyObject *NoHookCall_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    tls.busy++;
    PyObject *r = PyObject_Vectorcall(((NoHookCallObject *)self)->fn, args, nargsf, kwnames);
    tls.busy--;
    return r;
}

static PyObject *NoHookCall_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *fn;
    if (!PyArg_ParseTuple(args, "O:NoHookCall", &fn)) return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "NoHookCall needs a callable");
        return NULL;
    }
    NoHookCallObject *self = (NoHookCallObject *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->fn = Py_NewRef(fn);
    self->vectorcall = NoHookCall_vectorcall;
    return (PyObject *)self;
}

static void NoHookCall_dealloc(NoHookCallObject *self)
{
    Py_XDECREF(self->fn);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef NoHookCall_members[] = {
    {"fn", T_OBJECT, offsetof(NoHookCallObject, fn), READONLY, "the wrapped callable"},
    {NULL},
};

static PyTypeObject PydNoHookCall_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pydynamo._C.NoHookCall",
    .tp_basicsize = sizeof(NoHookCallObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "NoHookCall(fn): call fn with this thread's pydynamo hook off.",
    .tp_new = NoHookCall_new,
    .tp_dealloc = (destructor)NoHookCall_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(NoHookCallObject, vectorcall),
    .tp_members = NoHookCall_members,
};

/* ---------------------------------------------------------------- module functions */

/* tls.key for a new setting: its cache_key attribute (None or missing: no key). The last
 * setting's key is remembered with a weak reference to the setting (a live target cannot share
 * its address with another object), so the wrapper of a compiled function, which switches
 * between the same two settings at every call, reads no attribute. */
static int set_key(PyObject *setting)
{
    if (setting == Py_None || setting == Py_False) { tls.key = NULL; return 0; }
    if (tls.key_of == NULL || pyd_weakref_target(tls.key_of) != setting) {
        PyObject *k = PyObject_GetAttr(setting, key_attr);
        if (k == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
            PyErr_Clear();
        } else if (k == Py_None) {
            Py_CLEAR(k);
        }
        PyObject *ref = PyWeakref_NewRef(setting, NULL); /* NULL if it cannot be weakly referenced */
        if (ref == NULL) PyErr_Clear();
        PyObject *old_of = tls.key_of, *old_key = tls.key_cached;
        tls.key_of = ref;
        tls.key_cached = k;
        Py_XDECREF(old_of);
        Py_XDECREF(old_key);
    }
    tls.key = tls.key_cached;
    return 0;
}

static PyObject *set_eval_frame(PyObject *m, PyObject *setting)
{
    if (setting != Py_None && setting != Py_False && !PyCallable_Check(setting)) {
        PyErr_Format(PyExc_TypeError, "set_eval_frame takes None, False or a callable, not %.100s",
                     Py_TYPE(setting)->tp_name);
        return NULL;
    }
    if (set_key(setting) < 0) return NULL;
    PyObject *old = tls.setting ? tls.setting : Py_NewRef(Py_None); /* ownership moves to the caller */
    PyObject *new = setting == Py_None ? NULL : Py_NewRef(setting);
    active_threads += (new != NULL) - (old != Py_None);
    tls.setting = new;
    update_installation();
    return old;
}

static PyObject *get_eval_frame(PyObject *m, PyObject *unused)
{
    return Py_NewRef(tls.setting ? tls.setting : Py_None);
}

static PyObject *is_installed(PyObject *m, PyObject *unused)
{
    return PyBool_FromLong(_PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get()) == pyd_eval_frame);
}

static PyObject *set_error_handler(PyObject *m, PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "set_error_handler takes a callable or None");
        return NULL;
    }
    Py_XSETREF(error_handler, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyObject *debug_counters(PyObject *m, PyObject *unused)
{
    return Py_BuildValue("{sn,sn,sn,sn,sn,sn,si,sK}", "hits", n_hits, "misses", n_misses, "callbacks", n_callbacks,
                         "reinstalls", n_reinstalls, "live_extra_states", pyd_live_extra_states, "active_threads",
                         active_threads, "installed", installed,
                         "datastack_top", (unsigned long long)(uintptr_t)pyd_datastack_top(PyThreadState_Get()));
}

static PyMethodDef eval_frame_methods[] = {
    {"set_eval_frame", set_eval_frame, METH_O, "set_eval_frame(None | False | callback) -> previous setting"},
    {"get_eval_frame", get_eval_frame, METH_NOARGS, "this thread's setting"},
    {"is_installed", is_installed, METH_NOARGS, "whether our eval function is the interpreter's current one"},
    {"set_error_handler", set_error_handler, METH_O, "set_error_handler(fn): fn(exc) gets callback errors; True from it makes the frame raise exc"},
    {"debug_counters", debug_counters, METH_NOARGS, "counters for tests and tools"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "pydynamo._C",
    "PEP 523 frame-evaluation hook, per-code guarded cache and GuardSet (see pydynamo/_C.pyi).", -1,
};

static int add_functions(PyObject *m, PyMethodDef *defs)
{
    for (PyMethodDef *d = defs; d->ml_name; d++) {
        PyObject *f = PyCFunction_NewEx(d, NULL, PyModule_GetNameObject(m));
        if (f == NULL || PyModule_AddObject(m, d->ml_name, f) < 0) return -1;
    }
    return 0;
}

PyMODINIT_FUNC PyInit__C(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (PyType_Ready(&PydFrame_Type) < 0 || PyModule_AddObjectRef(m, "Frame", (PyObject *)&PydFrame_Type) < 0 ||
        PyType_Ready(&PydNoHookCall_Type) < 0 ||
        PyModule_AddObjectRef(m, "NoHookCall", (PyObject *)&PydNoHookCall_Type) < 0 ||
        pyd_guards_init(m) < 0 || pyd_cache_init(m) < 0 || add_functions(m, eval_frame_methods) < 0 ||
        add_functions(m, pyd_cache_methods) < 0)
        goto fail;
    if ((key_attr = PyUnicode_InternFromString("cache_key")) == NULL) goto fail;
    skip_marker = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
    if (skip_marker == NULL || PyModule_AddObjectRef(m, "SKIP", skip_marker) < 0) goto fail;
    /* The probe: a function with an empty body, compiled here so its code is ours alone. */
    PyObject *globals = Py_BuildValue("{s:O}", "__builtins__", PyEval_GetBuiltins());
    PyObject *r = globals ? PyRun_String("def _probe(): pass\n", Py_file_input, globals, globals) : NULL;
    Py_XDECREF(r);
    probe_fn = globals ? PyDict_GetItemString(globals, "_probe") : NULL;
    Py_XINCREF(probe_fn);
    Py_XDECREF(globals);
    if (probe_fn == NULL) goto fail;
    probe_code = (PyCodeObject *)PyFunction_GET_CODE(probe_fn);
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
