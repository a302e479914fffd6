/* The per-code cache in co_extra.
 *
 * Lifetime: code objects are not tracked by the cyclic GC, so nothing stored here may lead back
 * to the function, its globals or its module by strong references, or all of them leak. Entries
 * hold the new code object (which references only constants and names) and a GuardSet (which
 * holds user objects by weak reference where it can). The function object that runs an entry's
 * code is made per call from the frame's globals and closure, never stored.
 */
#include "cache.h"
#include "guards.h"
#include <structmember.h>

static Py_ssize_t extra_index = -1;
static ExtraState *all_states = NULL;
Py_ssize_t pyd_live_extra_states = 0;

static void free_extra(void *p)
{
    ExtraState *st = (ExtraState *)p;
    if (st == NULL) return;
    if (st->prev) st->prev->next = st->next;
    else all_states = st->next;
    if (st->next) st->next->prev = st->prev;
    pyd_live_extra_states--;
    PyObject *entries = st->entries, *skip_keys = st->skip_keys;
    PyMem_RawFree(st);
    Py_XDECREF(skip_keys);
    Py_XDECREF(entries); /* last: finalizers may run and touch other states */
}

ExtraState *pyd_extra_get(PyCodeObject *code)
{
    void *p = NULL;
    PYD_Code_GetExtra((PyObject *)code, extra_index, &p);
    return (ExtraState *)p;
}

ExtraState *pyd_extra_get_or_create(PyCodeObject *code)
{
    ExtraState *st = pyd_extra_get(code);
    if (st) return st;
    st = PyMem_RawCalloc(1, sizeof(ExtraState));
    if (st == NULL) { PyErr_NoMemory(); return NULL; }
    if (PYD_Code_SetExtra((PyObject *)code, extra_index, st) < 0) {
        PyMem_RawFree(st);
        return NULL;
    }
    st->next = all_states;
    if (all_states) all_states->prev = st;
    all_states = st;
    pyd_live_extra_states++;
    return st;
}

int pyd_extra_add_entry(PyCodeObject *code, PyObject *entry)
{
    ExtraState *st = pyd_extra_get_or_create(code);
    if (st == NULL) return -1;
    if (st->entries == NULL && (st->entries = PyList_New(0)) == NULL) return -1;
    return PyList_Insert(st->entries, 0, entry);
}

static PyCodeObject *code_arg(PyObject *o)
{
    if (PyFunction_Check(o)) o = PyFunction_GET_CODE(o);
    if (!PyCode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "expected a code object or a function, got %.100s", Py_TYPE(o)->tp_name);
        return NULL;
    }
    return (PyCodeObject *)o;
}

/* ---------------------------------------------------------------- CacheEntry */

/* The entry's code is called with the original frame's arguments and the original function's
 * closure, so both must line up exactly. */
static int check_compatible(PyCodeObject *orig, PyCodeObject *code)
{
    const int flags = CO_VARARGS | CO_VARKEYWORDS;
    if (orig->co_argcount != code->co_argcount || orig->co_posonlyargcount != code->co_posonlyargcount ||
        orig->co_kwonlyargcount != code->co_kwonlyargcount || (orig->co_flags & flags) != (code->co_flags & flags)) {
        PyErr_Format(PyExc_ValueError, "CacheEntry: code %R does not take the same arguments as %R", code, orig);
        return -1;
    }
    if (code->co_flags & (CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR)) {
        PyErr_SetString(PyExc_ValueError, "CacheEntry: entry code may not be a generator or coroutine");
        return -1;
    }
    int nargs = orig->co_argcount + orig->co_kwonlyargcount + !!(orig->co_flags & CO_VARARGS) +
                !!(orig->co_flags & CO_VARKEYWORDS);
    for (int i = 0; i < nargs; i++) {
        int eq = PyObject_RichCompareBool(PyTuple_GET_ITEM(orig->co_localsplusnames, i),
                                          PyTuple_GET_ITEM(code->co_localsplusnames, i), Py_EQ);
        if (eq != 1) {
            if (eq == 0) PyErr_Format(PyExc_ValueError, "CacheEntry: argument %d of %R has another name", i, code);
            return -1;
        }
    }
    PyObject *f1 = PyCode_GetFreevars(orig), *f2 = PyCode_GetFreevars(code);
    int eq = (f1 && f2) ? PyObject_RichCompareBool(f1, f2, Py_EQ) : -1;
    Py_XDECREF(f1);
    Py_XDECREF(f2);
    if (eq == 0) PyErr_Format(PyExc_ValueError, "CacheEntry: %R must have the same free variables as %R", code, orig);
    return eq == 1 ? 0 : -1;
}

static int CacheEntry_init(CacheEntryObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"guards", "code", "orig_code", "key", NULL};
    PyObject *guards, *code, *orig, *key = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!O!|O:CacheEntry", names, &guards, &PyCode_Type, &code,
                                     &PyCode_Type, &orig, &key))
        return -1;
    if (!PyCallable_Check(guards) && !PyObject_TypeCheck(guards, &PydGuardSet_Type)) {
        PyErr_SetString(PyExc_TypeError, "CacheEntry: guards must be a GuardSet or a callable");
        return -1;
    }
    if (check_compatible((PyCodeObject *)orig, (PyCodeObject *)code) < 0) return -1;
    if (PyObject_TypeCheck(guards, &PydGuardSet_Type)) {
        PyCodeObject *oc = (PyCodeObject *)orig;
        Py_ssize_t nargs = oc->co_argcount + oc->co_kwonlyargcount + !!(oc->co_flags & CO_VARARGS) +
                           !!(oc->co_flags & CO_VARKEYWORDS);
        if (pyd_guardset_max_local(guards) >= nargs) {
            PyErr_SetString(PyExc_ValueError,
                            "CacheEntry: a guard reads a local slot that is not an argument (unbound at entry)");
            return -1;
        }
    }
    /* The entry's code is run by the hook itself; its own frames are never intercepted. */
    ExtraState *st = pyd_extra_get_or_create((PyCodeObject *)code);
    if (st == NULL) return -1;
    st->skip = st->entry_code = 1;
    Py_XSETREF(self->guards, Py_NewRef(guards));
    Py_XSETREF(self->code, Py_NewRef(code));
    Py_XSETREF(self->key, key == Py_None ? NULL : Py_NewRef(key));
    self->orig_code = orig;
    return 0;
}

static void CacheEntry_dealloc(CacheEntryObject *self)
{
    Py_XDECREF(self->guards);
    Py_XDECREF(self->code);
    Py_XDECREF(self->key);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *CacheEntry_repr(CacheEntryObject *self)
{
    return PyUnicode_FromFormat("CacheEntry(code=%R, guards=%R)", self->code, self->guards);
}

static PyMemberDef CacheEntry_members[] = {
    {"guards", T_OBJECT, offsetof(CacheEntryObject, guards), READONLY, "GuardSet or callable"},
    {"code", T_OBJECT, offsetof(CacheEntryObject, code), READONLY, "the code run on a hit"},
    {"hits", T_PYSSIZET, offsetof(CacheEntryObject, hits), READONLY, "how many calls this entry served"},
    {"key", T_OBJECT, offsetof(CacheEntryObject, key), READONLY, "the cache_key of the setting that compiled it, or None"},
    {NULL},
};

PyTypeObject PydCacheEntry_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pydynamo._C.CacheEntry",
    .tp_basicsize = sizeof(CacheEntryObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "CacheEntry(guards, code, orig_code, key=None): run `code` in place of `orig_code` when `guards` hold "
              "and this thread's setting has the same cache_key (or is run-only).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)CacheEntry_init,
    .tp_dealloc = (destructor)CacheEntry_dealloc,
    .tp_repr = (reprfunc)CacheEntry_repr,
    .tp_members = CacheEntry_members,
};

/* ---------------------------------------------------------------- module functions */

static PyObject *get_cache_entries(PyObject *m, PyObject *o)
{
    PyCodeObject *code = code_arg(o);
    if (code == NULL) return NULL;
    ExtraState *st = pyd_extra_get(code);
    return (st && st->entries) ? PyList_GetSlice(st->entries, 0, PyList_GET_SIZE(st->entries)) : PyList_New(0);
}

static PyObject *cache_size(PyObject *m, PyObject *o)
{
    PyCodeObject *code = code_arg(o);
    if (code == NULL) return NULL;
    ExtraState *st = pyd_extra_get(code);
    return PyLong_FromSsize_t((st && st->entries) ? PyList_GET_SIZE(st->entries) : 0);
}

static PyObject *mark_skip(PyObject *m, PyObject *o)
{
    PyCodeObject *code = code_arg(o);
    ExtraState *st = code ? pyd_extra_get_or_create(code) : NULL;
    if (st == NULL) return NULL;
    st->skip = 1;
    Py_RETURN_NONE;
}

static PyObject *is_skipped(PyObject *m, PyObject *o)
{
    PyCodeObject *code = code_arg(o);
    if (code == NULL) return NULL;
    ExtraState *st = pyd_extra_get(code);
    return PyBool_FromLong(st && (st->skip || (st->skip_keys && PyList_GET_SIZE(st->skip_keys))));
}

static PyObject *reset_code(PyObject *m, PyObject *o)
{
    PyCodeObject *code = code_arg(o);
    if (code == NULL) return NULL;
    ExtraState *st = pyd_extra_get(code);
    if (st) {
        PyObject *entries = st->entries;
        st->entries = NULL;
        st->skip = st->entry_code;
        Py_CLEAR(st->skip_keys);
        Py_XDECREF(entries);
    }
    Py_RETURN_NONE;
}

/* Empties every state. The entries are collected first and released after the walk, because
 * releasing them can free code objects, whose free function unlinks states from the list. Codes
 * of cache entries keep their skip mark; every other mark is cleared. */
static PyObject *reset(PyObject *m, PyObject *unused)
{
    PyObject *dropped = PyList_New(0);
    if (dropped == NULL) return NULL;
    for (ExtraState *st = all_states; st; st = st->next) {
        if (st->entries && PyList_Append(dropped, st->entries) < 0) {
            Py_DECREF(dropped);
            return NULL;
        }
        Py_CLEAR(st->entries); /* the list in `dropped` holds it now: no finalizer runs here */
        st->skip = st->entry_code;
        Py_CLEAR(st->skip_keys); /* (keys hold nothing: no finalizer runs) */
    }
    Py_DECREF(dropped);
    Py_RETURN_NONE;
}

PyMethodDef pyd_cache_methods[] = {
    {"get_cache_entries", get_cache_entries, METH_O, "get_cache_entries(code) -> list of CacheEntry, newest first"},
    {"cache_size", cache_size, METH_O, "cache_size(code) -> number of cache entries"},
    {"mark_skip", mark_skip, METH_O, "mark_skip(code): never intercept this code (until reset)"},
    {"is_skipped", is_skipped, METH_O, "is_skipped(code) -> bool"},
    {"reset_code", reset_code, METH_O, "reset_code(code): drop this code's entries and skip mark"},
    {"reset", reset, METH_NOARGS, "reset(): drop every cache entry and skip mark"},
    {NULL},
};

int pyd_cache_init(PyObject *module)
{
    extra_index = PYD_RequestCodeExtraIndex(free_extra);
    if (extra_index < 0) {
        PyErr_SetString(PyExc_RuntimeError, "pydynamo: no code extra index left in this interpreter");
        return -1;
    }
    if (PyType_Ready(&PydCacheEntry_Type) < 0) return -1;
    return PyModule_AddObjectRef(module, "CacheEntry", (PyObject *)&PydCacheEntry_Type);
}
