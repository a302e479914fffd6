/* GuardSet: checks built from Python (pydynamo/guards.py), evaluated in C on every call.
 *
 * A check = a chain of steps that reads one value (root: argument slot, global, builtin or
 * closure cell; then getattr / getitem steps) + a test of that value. The protocol is documented
 * in pydynamo/_C.pyi. Soundness rules: a read that raises fails the check (never a pass), a dead
 * weak reference fails the check, and float constants compare bit for bit.
 *
 * This file reads values and evaluates a GuardSet; building one (GuardSet.add, the tree, the rest
 * of the type) is in guard_tree.c, and the types both share are in guards_internal.h.
 */
#include "guards_internal.h"
#include <string.h>

/* The C++ fast path, if pydynamo._tensor_guard was built and matches the running torch. */
static const PydTensorGuardAPI *fast_api = NULL;
static int fast_api_tried = 0;

const PydTensorGuardAPI *pyd_get_fast_api(void)
{
    if (!fast_api_tried) {
        fast_api_tried = 1;
        /* PyCapsule_Import imports only the first dotted component: import the module first */
        PyObject *m = PyImport_ImportModule("pydynamo._tensor_guard");
        fast_api = m ? PyCapsule_Import(PYD_TENSOR_GUARD_CAPSULE, 0) : NULL;
        Py_XDECREF(m);
        if (fast_api == NULL || fast_api->version != PYD_TENSOR_GUARD_API_VERSION) {
            fast_api = NULL;
            PyErr_Clear();
        }
    }
    return fast_api;
}

/* ---------------------------------------------------------------- reading values */

/* made in pyd_guards_init, kept forever */
static PyObject *str_size, *str_stride, *str_storage_offset, *str_func, *str_getattribute;
static PyObject *object_getattribute; /* object.__getattribute__ */

/* Whether attribute reads on instances of `tp` follow object.__getattribute__ (a class may still
 * define __getattr__, which only runs when that finds nothing: nn.Module does). */
static int generic_getattribute(PyTypeObject *tp)
{
    return tp->tp_getattro == PyObject_GenericGetAttr || _PyType_Lookup(tp, str_getattribute) == object_getattribute;
}

/* A Python __getattr__ known to look `name` up in dicts held in the instance's __dict__ under
 * the names in `table_getattr_tables`, in order, and to raise AttributeError otherwise
 * (nn.Module.__getattr__: _parameters, _buffers, _modules). Registered from Python by
 * set_table_getattr; NULL until then. */
static PyObject *table_getattr_func, *table_getattr_tables, *str_getattr, *str_dunder_dict;

/* The table lookup of table_getattr_func on `obj`: a new reference, NULL with no exception set if
 * the name is in no table, or NULL with *fallback set where the shortcut does not apply exactly
 * (a missing or non-dict instance dict or table: then the real __getattr__ runs). */
static PyObject *table_getattr(PyObject *obj, PyObject *name, int *fallback)
{
    PyObject **dictptr = _PyObject_GetDictPtr(obj);
    PyObject *dict_descr = _PyType_Lookup(Py_TYPE(obj), str_dunder_dict); /* self.__dict__ is the instance dict */
    if (dictptr == NULL || *dictptr == NULL || !PyDict_CheckExact(*dictptr) || !PyUnicode_CheckExact(name) ||
        dict_descr == NULL || !Py_IS_TYPE(dict_descr, &PyGetSetDescr_Type)) {
        *fallback = 1;
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(table_getattr_tables); i++) {
        PyObject *table = PyDict_GetItemWithError(*dictptr, PyTuple_GET_ITEM(table_getattr_tables, i));
        if (table == NULL) {
            if (PyErr_Occurred()) return NULL;
            continue;
        }
        if (!PyDict_CheckExact(table)) {
            *fallback = 1;
            return NULL;
        }
        PyObject *v = PyDict_GetItemWithError(table, name);
        if (v != NULL || PyErr_Occurred()) return Py_XNewRef(v);
    }
    return NULL;
}

/* getattr(obj, name), skipping the slot machinery of classes that only add __getattr__, and
 * that __getattr__ itself where it is the registered table lookup. */
static PyObject *read_attr(PyObject *obj, PyObject *name)
{
    PyTypeObject *tp = Py_TYPE(obj);
    if (tp->tp_getattro == PyObject_GenericGetAttr && PyUnicode_CheckExact(name))
        return _PyObject_GenericGetAttrWithDict(obj, name, NULL, 1); /* missing: NULL, no AttributeError made */
    if (tp->tp_getattro != PyObject_GenericGetAttr && generic_getattribute(tp)) {
        PyObject *v = _PyObject_GenericGetAttrWithDict(obj, name, NULL, 1);
        if (v != NULL || PyErr_Occurred()) return v;
        /* not found: __getattr__ may supply it */
        if (table_getattr_func != NULL && _PyType_Lookup(tp, str_getattr) == table_getattr_func) {
            int fallback = 0;
            v = table_getattr(obj, name, &fallback);
            if (!fallback) return v; /* NULL without an exception: no such attribute */
        }
    }
    return PyObject_GetAttr(obj, name);
}

/* getattr(obj, name).__func__ without making the bound method where the answer is plain: generic
 * attribute lookup, a Python function on the class, no instance attribute of that name. Then
 * the bound method's __func__ is that function. Anything else takes the two reads. */
static PyObject *read_method_func(PyObject *obj, PyObject *name)
{
    PyTypeObject *tp = Py_TYPE(obj);
    if (generic_getattribute(tp)) {
        PyObject *descr = _PyType_Lookup(tp, name); /* borrowed */
        if (descr != NULL && PyFunction_Check(descr)) {
            PyObject **dictptr = _PyObject_GetDictPtr(obj);
            PyObject *shadow = (dictptr && *dictptr) ? PyDict_GetItemWithError(*dictptr, name) : NULL;
            if (shadow == NULL && !PyErr_Occurred()) return Py_NewRef(descr);
            PyErr_Clear();
        }
    }
    PyObject *bound = read_attr(obj, name);
    if (bound == NULL) return NULL;
    PyObject *fn = PyObject_GetAttr(bound, str_func);
    Py_DECREF(bound);
    return fn;
}

/* New reference to the value `step` reads from `parent` (NULL for a root step), or NULL (with or
 * without an exception set) if it cannot be read. */
static PyObject *read_step(const Step *step, PyObject *parent, const PydGuardCtx *ctx)
{
    PyObject *v = NULL;
    switch (step->kind) {
    case ROOT_LOCAL:
        v = step->index < ctx->nlocals ? ctx->locals[step->index] : NULL;
        break;
    case ROOT_GLOBAL:
        v = PyDict_GetItemWithError(ctx->globals, step->name);
        break;
    case ROOT_BUILTIN:
        v = ctx->builtins ? PyDict_GetItemWithError(ctx->builtins, step->name) : NULL;
        break;
    case ROOT_CONST:
        v = step->name;
        break;
    case ROOT_CLOSURE:
        if (ctx->closure && step->index < PyTuple_GET_SIZE(ctx->closure))
            v = PyCell_GET(PyTuple_GET_ITEM(ctx->closure, step->index));
        break;
    case STEP_ATTR:
        return read_attr(parent, step->name);
    case STEP_METHOD_FUNC:
        return read_method_func(parent, step->name);
    case STEP_GENERIC_ATTR:
        return _PyObject_GenericGetAttrWithDict(parent, step->name, NULL, 1);
    case STEP_TYPE_LOOKUP:
        if (!PyType_Check(parent)) return NULL;
        v = _PyType_Lookup((PyTypeObject *)parent, step->name); /* borrowed; NULL: not found */
        break;
    case STEP_WEAKREF: /* the referent of a weakref.ref; unreadable once it is dead */
        if (!PyWeakref_CheckRefExact(parent)) return NULL;
#if PY_VERSION_HEX >= 0x030D0000
        if (PyWeakref_GetRef(parent, &v) <= 0) return NULL;
        return v;
#else
        v = PyWeakref_GetObject(parent);
        if (v == Py_None) return NULL;
        break;
#endif
    case STEP_DICT_ITEM: /* dict's own entry, for dict subclasses too: no __getitem__/__missing__ */
        if (!PyDict_Check(parent)) return NULL;
        v = PyDict_GetItemWithError(parent, step->name);
        break;
    case STEP_DICT_WEAKKEY: { /* dict's own entry for a key held weakly (a tensor) */
        if (!PyDict_Check(parent)) return NULL;
        PyObject *key;
#if PY_VERSION_HEX >= 0x030D0000
        if (PyWeakref_GetRef(step->name, &key) <= 0) return NULL;
#else
        key = PyWeakref_GetObject(step->name);
        if (key == Py_None) return NULL;
        Py_INCREF(key);
#endif
        v = PyDict_GetItemWithError(parent, key);
        Py_DECREF(key);
        break;
    }
    case STEP_ITEM:
        if (PyDict_CheckExact(parent)) {
            v = PyDict_GetItemWithError(parent, step->name);
            break;
        }
        return PyObject_GetItem(parent, step->name);
    }
    return Py_XNewRef(v);
}

/* ---------------------------------------------------------------- tests */

/* Same type and equal; floats bit for bit (so -0.0 != 0.0 and nan == nan); tuples item by item. */
static int const_equal(PyObject *a, PyObject *b)
{
    if (a == b) return 1;
    if (Py_TYPE(a) != Py_TYPE(b)) return 0;
    if (PyFloat_CheckExact(a)) {
        double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
        return memcmp(&x, &y, sizeof(double)) == 0;
    }
    if (PyTuple_CheckExact(a)) {
        Py_ssize_t n = PyTuple_GET_SIZE(a);
        if (n != PyTuple_GET_SIZE(b)) return 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            int r = const_equal(PyTuple_GET_ITEM(a, i), PyTuple_GET_ITEM(b, i));
            if (r != 1) return r;
        }
        return 1;
    }
    return PyObject_RichCompareBool(a, b, Py_EQ);
}

static PyObject *get_via(PyObject *descr, PyObject *obj)
{
    return Py_TYPE(descr)->tp_descr_get(descr, obj, (PyObject *)Py_TYPE(obj));
}

/* 1 match, 0 mismatch (detail names what differs), -1 error. */
static int int_tuple_matches(PyObject *tup, const int64_t *want, Py_ssize_t n, const char **detail,
                             const char *what)
{
    if (!PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) != n) { *detail = what; return 0; }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (want[i] == ANY_SIZE) continue;
        long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(tup, i));
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v != want[i]) { *detail = what; return 0; }
    }
    return 1;
}

/* The portable path: the metadata read through torch's own getters (looked up on TensorBase for
 * a tensor type, so a subclass's Python overrides of them are not what is read). */
static int tensor_reads_match(const TensorSpec *t, PyObject *v, const char **detail)
{
    PyObject *x;
    int r;
#define SAME_AS(descr, want, name)                                       \
    x = get_via(descr, v);                                               \
    if (x == NULL) return -1;                                            \
    r = (x == (want)) ? 1 : PyObject_RichCompareBool(x, (want), Py_EQ);  \
    Py_DECREF(x);                                                        \
    if (r != 1) { *detail = name; return r; }
    SAME_AS(t->d_dtype, t->dtype, "dtype");
    SAME_AS(t->d_device, t->device, "device");
    SAME_AS(t->d_layout, t->layout, "layout");
    SAME_AS(t->d_requires_grad, t->requires_grad, "requires_grad");
#undef SAME_AS
#define HAS_FLAG(method, bit, name)                                      \
    x = PyObject_Vectorcall(method, &v, 1, NULL);                        \
    if (x == NULL) return -1;                                            \
    r = PyObject_IsTrue(x);                                              \
    Py_DECREF(x);                                                        \
    if (r < 0) return -1;                                                \
    if (r != ((t->flags & (bit)) != 0)) { *detail = name; return 0; }
    HAS_FLAG(t->d_is_inference, PYD_TENSOR_INFERENCE, "inference");
    HAS_FLAG(t->d_is_conj, PYD_TENSOR_CONJ, "conj");
    HAS_FLAG(t->d_is_neg, PYD_TENSOR_NEG, "neg");
#undef HAS_FLAG
    x = get_via(t->d_shape, v);
    if (x == NULL) return -1;
    r = int_tuple_matches(x, t->sizes, t->ndim, detail, "size");
    Py_DECREF(x);
    if (r != 1) return r;
    x = PyObject_Vectorcall(t->d_stride, &v, 1, NULL);
    if (x == NULL) return -1;
    r = int_tuple_matches(x, t->strides, t->ndim, detail, "stride");
    Py_DECREF(x);
    return r;
}

/* A tensor subclass with a __torch_function__ would see those getters as calls offered to it:
 * they are read with subclass overrides off (torch._C.DisableTorchFunctionSubclass), as the
 * C++ fast path reads the tensor itself. */
static int tensor_matches(const TensorSpec *t, PyObject *v, const char **detail)
{
    if ((PyObject *)Py_TYPE(v) != t->type) { *detail = "type"; return 0; }
    if (t->fast) return fast_api->check(v, &t->spec, t->sizes, t->strides, t->ndim, detail);
    if (t->overrides_off == NULL) return tensor_reads_match(t, v, detail);
    PyObject *ctx = PyObject_CallNoArgs(t->overrides_off), *res;
    if (ctx == NULL) return -1;
    if ((res = PyObject_CallMethod(ctx, "__enter__", NULL)) == NULL) { Py_DECREF(ctx); return -1; }
    Py_DECREF(res);
    int r = tensor_reads_match(t, v, detail);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    res = PyObject_CallMethod(ctx, "__exit__", "OOO", Py_None, Py_None, Py_None);
    Py_DECREF(ctx);
    if (res == NULL) { Py_XDECREF(et); Py_XDECREF(ev); Py_XDECREF(tb); return -1; }
    Py_DECREF(res);
    PyErr_Restore(et, ev, tb);
    return r;
}

static int dict_keys_match(PyObject *v, PyObject *keys)
{
    if (!PyDict_CheckExact(v) || PyDict_GET_SIZE(v) != PyTuple_GET_SIZE(keys)) return 0;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *unused;
    while (PyDict_Next(v, &pos, &k, &unused)) {
        PyObject *want = PyTuple_GET_ITEM(keys, i++);
        if (k == want) continue;
        if (Py_TYPE(k) != Py_TYPE(want)) return 0;
        int r = PyObject_RichCompareBool(k, want, Py_EQ);
        if (r != 1) return r;
    }
    return 1;
}

/* EMPTY_ATTRS: len(getattr(v, name)) == 0 for each name (an nn.Module's hook dicts), read from
 * the instance dict in one go where that is what getattr would find. */
static int attrs_empty(PyObject *v, PyObject *names)
{
    PyTypeObject *tp = Py_TYPE(v);
    PyObject **dictptr = generic_getattribute(tp) ? _PyObject_GetDictPtr(v) : NULL;
    if (dictptr == NULL) PyErr_Clear();
    PyObject *dict = dictptr ? *dictptr : NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i), *attr = NULL;
        Py_ssize_t n;
        /* the instance dict decides unless the class has a (data) descriptor of that name */
        if (dict != NULL && _PyType_Lookup(tp, name) == NULL) attr = Py_XNewRef(PyDict_GetItemWithError(dict, name));
        if (attr == NULL) {
            if (PyErr_Occurred()) return -1;
            if ((attr = read_attr(v, name)) == NULL) return -1;
        }
        n = PyDict_CheckExact(attr) ? PyDict_GET_SIZE(attr) : PyObject_Length(attr);
        Py_DECREF(attr);
        if (n != 0) return n < 0 ? -1 : 0;
    }
    return 1;
}

/* Test one check on its value `v` (NULL: it could not be read). 1 pass, 0 fail, -1 error
 * (a failure too). */
static int test_value(const Check *c, PyObject *v, const char **detail)
{
    if (v == NULL) {
        if (c->kind == NOT_PRESENT) return 1;
        *detail = "value could not be read";
        return 0;
    }
    int ok = 0;
    PyObject *target = c->value;
    if (c->weak) {
        target = pyd_weakref_target(c->value);
        if (target == Py_None) { /* dead: the guarded object is gone (None is never weakly held) */
            *detail = "guarded object no longer exists";
            return 0;
        }
    }
    switch (c->kind) {
    case TYPE_MATCH: ok = (PyObject *)Py_TYPE(v) == target; break;
    case ID_MATCH: ok = v == target; break;
    case EQUALS_MATCH: ok = const_equal(v, target); break;
    case TENSOR_MATCH: ok = tensor_matches(c->tensor, v, detail); break;
    case DICT_KEYS: ok = dict_keys_match(v, target); break;
    case LEN: {
        Py_ssize_t n = PyObject_Length(v);
        ok = n < 0 ? -1 : n == PyLong_AsSsize_t(target);
        break;
    }
    case EMPTY_ATTRS: ok = attrs_empty(v, target); break;
    case PREDICATE: {
        PyObject *r = PyObject_CallOneArg(target, v);
        ok = r == NULL ? -1 : PyObject_IsTrue(r);
        Py_XDECREF(r);
        break;
    }
    case NOT_PRESENT: ok = 0; *detail = "value is present"; break;
    }
    return ok;
}

/* The first failing check under `node`, whose value is `v` (NULL: unreadable); -1 if all pass. */
static Py_ssize_t eval_node(GuardSetObject *gs, const Node *node, PyObject *v, const PydGuardCtx *ctx,
                            PyObject **slots, const char **detail)
{
    for (Py_ssize_t i = 0; v != NULL && i < node->ncaptures; i++)
        if (slots[node->captures[i]] == NULL) slots[node->captures[i]] = Py_NewRef(v);
    for (Py_ssize_t i = 0; i < node->ntests; i++) {
        int ok = test_value(&gs->checks[node->tests[i]], v, detail);
        if (ok == 1) continue;
        if (ok < 0) {
            PyErr_Clear();
            *detail = "raised an exception";
        }
        return node->tests[i];
    }
    for (Py_ssize_t k = 0; k < node->nkids; k++) {
        const Node *kid = node->kids[k];
        PyObject *kv = NULL;
        if (v != NULL || node == &gs->root) {
            kv = read_step(&kid->step, v, ctx);
            if (kv == NULL && PyErr_Occurred()) PyErr_Clear();
        }
        if (kv == NULL && !kid->needs_value) continue; /* only NOT_PRESENT checks below: they pass */
        Py_ssize_t failed = eval_node(gs, kid, kv, ctx, slots, detail);
        Py_XDECREF(kv);
        if (failed >= 0) return failed;
    }
    return -1;
}

/* ALIASING: among the values read by c->paths, two are the same object exactly when their
 * groups are equal, as when the graph was traced. Compiled graphs (AOTAutograd) specialize on
 * which tensor inputs alias each other. The values were left in `slots` by the tree's walk (NULL:
 * unreadable, which other checks report). Sorted by address, then by group: within a run of one
 * address the groups must agree, and within a run of one group the addresses. A third item of
 * the check's value, a Python callable, is then called with the tuple of values: which of them
 * share memory, where the graph changes one, must also be as traced (guards.py MemoryOverlap). */
typedef struct { PyObject *v; long group; } AliasItem;

static int by_address(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const AliasItem *)a)->v, y = (uintptr_t)((const AliasItem *)b)->v;
    return x < y ? -1 : x > y;
}

static int by_group(const void *a, const void *b)
{
    long x = ((const AliasItem *)a)->group, y = ((const AliasItem *)b)->group;
    return x < y ? -1 : x > y;
}

static int aliasing_matches(const Check *c, PyObject **slots, const char **detail)
{
    AliasItem small[32], *items = c->npaths <= 32 ? small : PyMem_Malloc(c->npaths * sizeof(AliasItem));
    if (items == NULL) return -1;
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < c->npaths; i++)
        if (slots[c->paths[i].slot] != NULL) items[n++] = (AliasItem){slots[c->paths[i].slot], c->paths[i].group};
    int ok = 1;
    qsort(items, n, sizeof(AliasItem), by_address);
    for (Py_ssize_t i = 1; i < n && ok; i++)
        if (items[i].v == items[i - 1].v && items[i].group != items[i - 1].group) {
            ok = 0;
            *detail = "two inputs are now the same object";
        }
    qsort(items, n, sizeof(AliasItem), by_group);
    for (Py_ssize_t i = 1; i < n && ok; i++)
        if (items[i].group == items[i - 1].group && items[i].v != items[i - 1].v) {
            ok = 0;
            *detail = "inputs no longer alias";
        }
    if (items != small) PyMem_Free(items);
    PyObject *overlap = PyTuple_GET_SIZE(c->value) > 2 ? PyTuple_GET_ITEM(c->value, 2) : NULL;
    if (ok && overlap != NULL) {
        /* the memory-overlap predicate: called with every path's value (None: unreadable) */
        PyObject *values = PyTuple_New(c->npaths);
        if (values == NULL) return -1;
        for (Py_ssize_t i = 0; i < c->npaths; i++) {
            PyObject *v = slots[c->paths[i].slot];
            PyTuple_SET_ITEM(values, i, Py_NewRef(v != NULL ? v : Py_None));
        }
        PyObject *r = PyObject_CallOneArg(overlap, values);
        Py_DECREF(values);
        ok = r ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
        if (ok < 0) { PyErr_Clear(); ok = 0; *detail = "the overlap check raised an exception"; }
        else if (!ok) *detail = "inputs that the graph changes now share memory differently";
    }
    return ok;
}

int pyd_guardset_check(PyObject *self, const PydGuardCtx *ctx, PyObject **why)
{
    GuardSetObject *gs = (GuardSetObject *)self;
    const char *detail = NULL;
    Py_ssize_t failed = -1;
    PyObject *small[64], **slots = gs->nslots <= 64 ? small : PyMem_Malloc(gs->nslots * sizeof(PyObject *));
    if (slots == NULL) {
        PyErr_Clear();
        return 0; /* no memory: a miss, never a wrong hit */
    }
    memset(slots, 0, gs->nslots * sizeof(PyObject *));
    /* checks without steps first: global-state predicates */
    for (Py_ssize_t i = 0; i < gs->n && failed < 0; i++) {
        const Check *c = &gs->checks[i];
        if (c->nsteps || c->kind != PREDICATE) continue;
        PyObject *r = PyObject_CallNoArgs(c->value);
        int ok = r ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
        if (ok < 0) { PyErr_Clear(); detail = "raised an exception"; }
        if (ok != 1) failed = i;
    }
    if (failed < 0) failed = eval_node(gs, &gs->root, NULL, ctx, slots, &detail);
    /* aliasing, on the values the tree's walk kept */
    for (Py_ssize_t i = 0; i < gs->n && failed < 0; i++) {
        if (gs->checks[i].kind != ALIASING) continue;
        int ok = aliasing_matches(&gs->checks[i], slots, &detail);
        if (ok < 0) { PyErr_Clear(); detail = "out of memory"; }
        if (ok != 1) failed = i;
    }
    for (Py_ssize_t i = 0; i < gs->nslots; i++) Py_XDECREF(slots[i]);
    if (slots != small) PyMem_Free(slots);
    /* symbolic-shape facts last: the tensors they read have passed TENSOR_MATCH (rank known) */
    for (Py_ssize_t i = 0; i < gs->n && failed < 0; i++)
        if (gs->checks[i].kind == SHAPE_ENV && pyd_shape_program_check(gs->checks[i].shapes, ctx, &detail) != 1)
            failed = i;
    if (failed < 0) return 1;
    if (why != NULL) {
        const Check *c = &gs->checks[failed];
        *why = detail ? PyUnicode_FromFormat("%U (%s)", c->text, detail) : Py_NewRef(c->text);
        if (*why == NULL) PyErr_Clear();
    }
    return 0;
}

int pyd_guardset_is_dead(PyObject *self)
{
    if (!PyObject_TypeCheck(self, &PydGuardSet_Type)) return 0;
    GuardSetObject *gs = (GuardSetObject *)self;
    for (Py_ssize_t i = 0; i < gs->n; i++)
        if (gs->checks[i].weak && pyd_weakref_target(gs->checks[i].value) == Py_None) return 1;
    return 0;
}

Py_ssize_t pyd_guardset_max_local(PyObject *self) { return ((GuardSetObject *)self)->max_local; }

/* ---------------------------------------------------------------- chains outside checks */

struct PydChain {
    Check c; /* only its steps are used */
};

PydChain *pyd_chain_parse(PyObject *steps)
{
    PydChain *chain = PyMem_Calloc(1, sizeof(PydChain));
    if (chain == NULL) return (PydChain *)PyErr_NoMemory();
    if (pyd_parse_steps(steps, &chain->c) < 0) {
        pyd_chain_free(chain);
        return NULL;
    }
    return chain;
}

void pyd_chain_free(PydChain *chain)
{
    if (chain == NULL) return;
    pyd_free_check(&chain->c);
    PyMem_Free(chain);
}

PyObject *pyd_chain_read(const PydChain *chain, const PydGuardCtx *ctx)
{
    PyObject *v = NULL;
    for (Py_ssize_t i = 0; i < chain->c.nsteps; i++) {
        PyObject *next = read_step(&chain->c.steps[i], v, ctx);
        Py_XDECREF(v);
        if ((v = next) == NULL) {
            PyErr_Clear();
            return NULL;
        }
    }
    return v;
}

PyObject *pyd_str_size(void) { return str_size; }
PyObject *pyd_str_stride(void) { return str_stride; }
PyObject *pyd_str_storage_offset(void) { return str_storage_offset; }

/* ---------------------------------------------------------------- module functions */

static PyObject *fast_tensor_guards(PyObject *m, PyObject *unused)
{
    return PyBool_FromLong(pyd_get_fast_api() != NULL);
}

static PyObject *set_table_getattr(PyObject *m, PyObject *args)
{
    PyObject *func, *tables;
    if (!PyArg_ParseTuple(args, "OO!", &func, &PyTuple_Type, &tables)) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tables); i++)
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(tables, i))) {
            PyErr_SetString(PyExc_TypeError, "set_table_getattr: table names must be str");
            return NULL;
        }
    Py_XSETREF(table_getattr_func, Py_NewRef(func));
    Py_XSETREF(table_getattr_tables, Py_NewRef(tables));
    Py_RETURN_NONE;
}

static PyMethodDef guards_functions[] = {
    {"set_table_getattr", set_table_getattr, METH_VARARGS,
     "set_table_getattr(func, tables): guards may run a class's __getattr__ that is `func` as a lookup of the "
     "name in the instance-dict entries named by `tables` (dicts), in order; func must behave exactly so"},
    {"fast_tensor_guards", fast_tensor_guards, METH_NOARGS,
     "whether TENSOR_MATCH uses the C++ fast path (pydynamo._tensor_guard, built against this torch)"},
    {NULL},
};

int pyd_guards_init(PyObject *module)
{
    if (PyModule_AddFunctions(module, guards_functions) < 0) return -1;
    if (!(str_size = PyUnicode_InternFromString("size")) || !(str_stride = PyUnicode_InternFromString("stride")) ||
        !(str_storage_offset = PyUnicode_InternFromString("storage_offset")) ||
        !(str_func = PyUnicode_InternFromString("__func__")) ||
        !(str_getattribute = PyUnicode_InternFromString("__getattribute__")) ||
        !(str_getattr = PyUnicode_InternFromString("__getattr__")) ||
        !(str_dunder_dict = PyUnicode_InternFromString("__dict__")))
        return -1;
    if ((object_getattribute = _PyType_Lookup(&PyBaseObject_Type, str_getattribute)) == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "object.__getattribute__ not found");
        return -1;
    }
    Py_INCREF(object_getattribute);
    if (PyType_Ready(&PydGuardSet_Type) < 0) return -1;
    return PyModule_AddObjectRef(module, "GuardSet", (PyObject *)&PydGuardSet_Type);
}
