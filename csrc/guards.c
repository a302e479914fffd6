/* GuardSet: checks built from Python (pydynamo/guards.py), evaluated in C on every call.
 *
 * A check = a chain of steps that reads one value (root: argument slot, global, builtin or
 * closure cell; then getattr / getitem steps) + a test of that value. The protocol is documented
 * in pydynamo/_C.pyi. Soundness rules: a read that raises fails the check (never a pass), a dead
 * weak reference fails the check, and float constants compare bit for bit.
 */
#include "guards.h"
#include "tensor_guard.h"
#include "shape_guards.h"
#include <string.h>

/* STEP_METHOD_FUNC: an ("a", name), ("a", "__func__") pair fused when the steps are parsed: the
 * function `obj.name` binds, read without making the bound method (see read_method_func).
 * STEP_TYPE_LOOKUP ("t", name): the attribute a class finds along its MRO, as stored there (no
 * descriptor is called): what CPython's _PyType_Lookup answers, the first step of every
 * attribute read and special-method call on an instance.
 * STEP_GENERIC_ATTR ("g", name): object.__getattribute__(v, name), bypassing a Python
 * __getattribute__ of v's class (how such a class reads its own __dict__).
 * ROOT_CONST ("K", obj): the object itself, held by the check (a class found as a dict's key, whose
 * identity another check pinned); what hangs below it guards the object's current state. */
enum { ROOT_LOCAL, ROOT_GLOBAL, ROOT_BUILTIN, ROOT_CLOSURE, ROOT_CONST, STEP_ATTR, STEP_ITEM, STEP_METHOD_FUNC,
       STEP_TYPE_LOOKUP, STEP_GENERIC_ATTR };
enum { TYPE_MATCH, ID_MATCH, EQUALS_MATCH, TENSOR_MATCH, DICT_KEYS, LEN, PREDICATE, NOT_PRESENT, ALIASING,
       SHAPE_ENV, EMPTY_ATTRS };
static const char *const KIND_NAMES[] = {"TYPE_MATCH", "ID_MATCH",  "EQUALS_MATCH", "TENSOR_MATCH", "DICT_KEYS",
                                         "LEN",        "PREDICATE", "NOT_PRESENT",  "ALIASING",     "SHAPE_ENV",
                                         "EMPTY_ATTRS"};
#define N_KINDS ((int)(sizeof(KIND_NAMES) / sizeof(KIND_NAMES[0])))

typedef struct {
    int kind;
    Py_ssize_t index;  /* ROOT_LOCAL, ROOT_CLOSURE */
    PyObject *name;    /* ROOT_GLOBAL, ROOT_BUILTIN, STEP_ATTR (str); STEP_ITEM (key); ROOT_CONST (the object) */
} Step;

#define ANY_SIZE INT64_MIN

typedef struct {
    PyObject *type, *dtype, *device, *layout, *requires_grad;
    /* descriptors looked up on the exact type once, so a check costs no attribute lookup */
    PyObject *d_dtype, *d_device, *d_layout, *d_requires_grad, *d_shape, *d_stride;
    PyObject *d_is_inference, *d_is_conj, *d_is_neg; /* methods: called with the tensor */
    int flags;                /* PYD_TENSOR_INFERENCE / _CONJ / _NEG bits the tensor must have */
    Py_ssize_t ndim;
    int64_t *sizes, *strides; /* ANY_SIZE = not checked (a dynamic dimension) */
    int fast;                 /* checked by the C++ fast path (tensor_guard.h) */
    PydFastTensorSpec spec;
} TensorSpec;

/* The C++ fast path, if pydynamo._tensor_guard was built and matches the running torch. */
static const PydTensorGuardAPI *fast_api = NULL;
static int fast_api_tried = 0;

static const PydTensorGuardAPI *get_fast_api(void)
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

typedef struct {
    Step *steps;
    Py_ssize_t nsteps;
    int kind;
    PyObject *value;  /* ID/TYPE_MATCH: the object or a weakref to it; others: the constant */
    int weak;         /* value is a weakref to the real target */
    TensorSpec *tensor;
    PydShapeProgram *shapes; /* SHAPE_ENV */
    PyObject *text;
    struct { Step *steps; Py_ssize_t nsteps; long group; Py_ssize_t slot; } *paths; /* ALIASING: values, groups,
                                                  and where the tree leaves each value (see Node.captures) */
    Py_ssize_t npaths;
} Check;

/* The checks form a tree by their steps, so a value that many checks read through the same
 * chain (L['self'].layers[3].conv1 ...) is read once per evaluation, not once per check. */
typedef struct Node {
    Step step;                  /* how this node's value is read from its parent's */
    Py_ssize_t *tests, ntests;  /* indices of the checks that test this node's value */
    struct Node **kids;
    Py_ssize_t nkids;
    int needs_value;            /* some check in this subtree fails if the value cannot be read */
    Py_ssize_t *captures, ncaptures; /* value slots this node's value is kept in (ALIASING paths) */
} Node;

typedef struct {
    PyObject_HEAD
    Check *checks;
    Py_ssize_t n, cap;
    Py_ssize_t max_local;
    Py_ssize_t nslots;          /* value slots the ALIASING checks' paths fill while the tree is evaluated */
    Node root;                  /* its kids are the roots (argument slots, globals, ...) */
} GuardSetObject;

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

static int tensor_matches(const TensorSpec *t, PyObject *v, const char **detail)
{
    if ((PyObject *)Py_TYPE(v) != t->type) { *detail = "type"; return 0; }
    if (t->fast) return fast_api->check(v, &t->spec, t->sizes, t->strides, t->ndim, detail);
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

static int parse_steps(PyObject *steps, Check *c);
static void free_check(Check *c);

struct PydChain {
    Check c; /* only its steps are used */
};

PydChain *pyd_chain_parse(PyObject *steps)
{
    PydChain *chain = PyMem_Calloc(1, sizeof(PydChain));
    if (chain == NULL) return (PydChain *)PyErr_NoMemory();
    if (parse_steps(steps, &chain->c) < 0) {
        pyd_chain_free(chain);
        return NULL;
    }
    return chain;
}

void pyd_chain_free(PydChain *chain)
{
    if (chain == NULL) return;
    free_check(&chain->c);
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

/* ---------------------------------------------------------------- building from Python */

static int parse_steps(PyObject *steps, Check *c)
{
    if (!PyTuple_Check(steps)) {
        PyErr_SetString(PyExc_TypeError, "GuardSet.add: steps must be a tuple of (kind, arg) pairs");
        return -1;
    }
    c->nsteps = PyTuple_GET_SIZE(steps);
    c->steps = PyMem_Calloc(c->nsteps ? c->nsteps : 1, sizeof(Step));
    if (c->steps == NULL) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < c->nsteps; i++) {
        PyObject *s = PyTuple_GET_ITEM(steps, i);
        const char *k;
        PyObject *arg;
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) != 2 ||
            (k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(s, 0))) == NULL) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "GuardSet.add: step %zd must be a (str, arg) pair, got %R", i, s);
            return -1;
        }
        arg = PyTuple_GET_ITEM(s, 1);
        Step *st = &c->steps[i];
        int is_root = (i == 0);
        if (is_root && (k[0] == 'L' || k[0] == 'C') && k[1] == 0) {
            st->kind = k[0] == 'L' ? ROOT_LOCAL : ROOT_CLOSURE;
            st->index = PyLong_AsSsize_t(arg);
            if (st->index < 0) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "GuardSet.add: negative slot index");
                return -1;
            }
            continue;
        }
        if (is_root && (k[0] == 'G' || k[0] == 'B') && k[1] == 0) st->kind = k[0] == 'G' ? ROOT_GLOBAL : ROOT_BUILTIN;
        else if (is_root && k[0] == 'K' && k[1] == 0) st->kind = ROOT_CONST;
        else if (!is_root && k[0] == 'a' && k[1] == 0) st->kind = STEP_ATTR;
        else if (!is_root && k[0] == 'i' && k[1] == 0) st->kind = STEP_ITEM;
        else if (!is_root && k[0] == 't' && k[1] == 0) st->kind = STEP_TYPE_LOOKUP;
        else if (!is_root && k[0] == 'g' && k[1] == 0) st->kind = STEP_GENERIC_ATTR;
        else {
            PyErr_Format(PyExc_ValueError, "GuardSet.add: bad %s step %R (roots: L, G, B, C, K; then a, i, t, g)",
                         is_root ? "root" : "chain", s);
            return -1;
        }
        if (st->kind != STEP_ITEM && st->kind != ROOT_CONST && !PyUnicode_Check(arg)) {
            PyErr_Format(PyExc_TypeError, "GuardSet.add: step %R needs a str name", s);
            return -1;
        }
        st->name = Py_NewRef(arg);
    }
    /* fuse each (a name, a __func__) pair into one STEP_METHOD_FUNC step */
    Py_ssize_t out = 0;
    for (Py_ssize_t i = 0; i < c->nsteps; i++) {
        Step st = c->steps[i];
        if (out > 0 && st.kind == STEP_ATTR && c->steps[out - 1].kind == STEP_ATTR &&
            PyUnicode_CompareWithASCIIString(st.name, "__func__") == 0) {
            c->steps[out - 1].kind = STEP_METHOD_FUNC;
            Py_DECREF(st.name);
            continue;
        }
        c->steps[out++] = st;
    }
    for (Py_ssize_t i = out; i < c->nsteps; i++) c->steps[i] = (Step){0};
    c->nsteps = out;
    return 0;
}

static PyObject *lookup_descr(PyObject *type, const char *name)
{
    PyObject *key = PyUnicode_InternFromString(name);
    if (key == NULL) return NULL;
    PyObject *d = _PyType_Lookup((PyTypeObject *)type, key); /* borrowed */
    Py_DECREF(key);
    if (d == NULL || Py_TYPE(d)->tp_descr_get == NULL) {
        PyErr_Format(PyExc_TypeError, "TENSOR_MATCH: type %R has no descriptor %s", type, name);
        return NULL;
    }
    return Py_NewRef(d);
}

static int parse_int_tuple(PyObject *tup, Py_ssize_t n, int64_t **out)
{
    if (!PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) != n) {
        PyErr_SetString(PyExc_TypeError, "TENSOR_MATCH: sizes and strides must be tuples of equal length");
        return -1;
    }
    *out = PyMem_Calloc(n ? n : 1, sizeof(int64_t));
    if (*out == NULL) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(tup, i);
        if (item == Py_None) { (*out)[i] = ANY_SIZE; continue; }
        (*out)[i] = PyLong_AsLongLong(item);
        if ((*out)[i] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

static void free_tensor_spec(TensorSpec *t)
{
    if (t == NULL) return;
    Py_XDECREF(t->type); Py_XDECREF(t->dtype); Py_XDECREF(t->device); Py_XDECREF(t->layout);
    Py_XDECREF(t->requires_grad); Py_XDECREF(t->d_dtype); Py_XDECREF(t->d_device);
    Py_XDECREF(t->d_layout); Py_XDECREF(t->d_requires_grad); Py_XDECREF(t->d_shape);
    Py_XDECREF(t->d_stride); Py_XDECREF(t->d_is_inference); Py_XDECREF(t->d_is_conj); Py_XDECREF(t->d_is_neg);
    PyMem_Free(t->sizes); PyMem_Free(t->strides); PyMem_Free(t);
}

static int parse_tensor_spec(PyObject *value, Check *c)
{
    /* the three flags may be left out: a plain tensor (none of them set) */
    PyObject *type, *dtype, *device, *layout, *rg, *sizes, *strides;
    PyObject *inference = Py_False, *conj = Py_False, *neg = Py_False;
    if (!PyTuple_Check(value) || (PyTuple_GET_SIZE(value) != 7 && PyTuple_GET_SIZE(value) != 10) ||
        !PyArg_ParseTuple(value, "O!OOOOOO|O!O!O!", &PyType_Type, &type, &dtype, &device, &layout, &rg, &sizes,
                          &strides, &PyBool_Type, &inference, &PyBool_Type, &conj, &PyBool_Type, &neg)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "TENSOR_MATCH value must be (type, dtype, device, layout, requires_grad, "
                                         "sizes, strides[, is_inference, is_conj, is_neg]), the last three bools");
        return -1;
    }
    TensorSpec *t = c->tensor = PyMem_Calloc(1, sizeof(TensorSpec));
    if (t == NULL) { PyErr_NoMemory(); return -1; }
    t->type = Py_NewRef(type); t->dtype = Py_NewRef(dtype); t->device = Py_NewRef(device);
    t->layout = Py_NewRef(layout); t->requires_grad = Py_NewRef(rg);
    t->flags = (inference == Py_True ? PYD_TENSOR_INFERENCE : 0) | (conj == Py_True ? PYD_TENSOR_CONJ : 0) |
               (neg == Py_True ? PYD_TENSOR_NEG : 0);
    if (!(t->d_dtype = lookup_descr(type, "dtype")) || !(t->d_device = lookup_descr(type, "device")) ||
        !(t->d_layout = lookup_descr(type, "layout")) ||
        !(t->d_requires_grad = lookup_descr(type, "requires_grad")) ||
        !(t->d_shape = lookup_descr(type, "shape")) || !(t->d_stride = lookup_descr(type, "stride")) ||
        !(t->d_is_inference = lookup_descr(type, "is_inference")) ||
        !(t->d_is_conj = lookup_descr(type, "is_conj")) || !(t->d_is_neg = lookup_descr(type, "is_neg")))
        return -1;
    if (!PyTuple_Check(sizes)) { PyErr_SetString(PyExc_TypeError, "TENSOR_MATCH: sizes must be a tuple"); return -1; }
    t->ndim = PyTuple_GET_SIZE(sizes);
    if (parse_int_tuple(sizes, t->ndim, &t->sizes) < 0 || parse_int_tuple(strides, t->ndim, &t->strides) < 0)
        return -1;
    const PydTensorGuardAPI *api = get_fast_api();
    if (api != NULL && (rg == Py_True || rg == Py_False)) {
        if (api->encode(type, dtype, device, layout, &t->spec) == 0) {
            t->fast = 1;
            t->spec.flags = t->flags | (rg == Py_True ? PYD_TENSOR_REQUIRES_GRAD : 0);
        }
        else PyErr_Clear(); /* not torch objects: the portable path reports the mismatch */
    }
    return 0;
}

static void free_check(Check *c)
{
    for (Py_ssize_t p = 0; p < c->npaths; p++) {
        for (Py_ssize_t i = 0; i < c->paths[p].nsteps; i++) Py_XDECREF(c->paths[p].steps[i].name);
        PyMem_Free(c->paths[p].steps);
    }
    PyMem_Free(c->paths);
    for (Py_ssize_t i = 0; i < c->nsteps; i++) Py_XDECREF(c->steps[i].name);
    PyMem_Free(c->steps);
    Py_XDECREF(c->value);
    Py_XDECREF(c->text);
    free_tensor_spec(c->tensor);
    pyd_shape_program_free(c->shapes);
    memset(c, 0, sizeof(*c));
}

/* ---------------------------------------------------------------- the tree */

static int same_step(const Step *a, const Step *b)
{
    if (a->kind != b->kind) return 0;
    if (a->kind == ROOT_LOCAL || a->kind == ROOT_CLOSURE) return a->index == b->index;
    if (a->kind == ROOT_CONST) return a->name == b->name;
    if (Py_TYPE(a->name) != Py_TYPE(b->name)) return 0;
    int r = PyObject_RichCompareBool(a->name, b->name, Py_EQ);
    if (r < 0) PyErr_Clear();
    return r == 1;
}

/* Grow an array of `n` elements of `size` bytes by one; 0 or -1 (MemoryError set). */
static int append_slot(void **array, Py_ssize_t n, size_t size)
{
    void *grown = PyMem_Realloc(*array, (n + 1) * size);
    if (grown == NULL) { PyErr_NoMemory(); return -1; }
    *array = grown;
    return 0;
}

static Node *child_for(Node *node, const Step *step)
{
    for (Py_ssize_t k = 0; k < node->nkids; k++)
        if (same_step(&node->kids[k]->step, step)) return node->kids[k];
    Node *kid = PyMem_Calloc(1, sizeof(Node));
    if (kid == NULL || append_slot((void **)&node->kids, node->nkids, sizeof(Node *)) < 0) {
        PyMem_Free(kid);
        if (!PyErr_Occurred()) PyErr_NoMemory();
        return NULL;
    }
    kid->step = *step;
    Py_XINCREF(kid->step.name);
    node->kids[node->nkids++] = kid;
    return kid;
}

/* Put check `idx` in the tree. Checks without steps (global-state predicates) stay outside. */
static int tree_insert(GuardSetObject *gs, Py_ssize_t idx)
{
    Check *c = &gs->checks[idx];
    Node *node = &gs->root;
    int needs = c->kind != NOT_PRESENT;
    if (c->kind == ALIASING) {
        /* each path's value is kept by its node while the tree is walked; slots are never reused,
         * so a capture left by a failed insert fills a slot no check reads */
        Py_ssize_t first = gs->nslots;
        gs->nslots += c->npaths;
        for (Py_ssize_t p = 0; p < c->npaths; p++) {
            node = &gs->root;
            for (Py_ssize_t i = 0; i < c->paths[p].nsteps; i++)
                if ((node = child_for(node, &c->paths[p].steps[i])) == NULL) return -1;
            if (append_slot((void **)&node->captures, node->ncaptures, sizeof(Py_ssize_t)) < 0) return -1;
            c->paths[p].slot = first + p;
            node->captures[node->ncaptures++] = first + p;
        }
        return 0;
    }
    for (Py_ssize_t i = 0; i < c->nsteps; i++) {
        if ((node = child_for(node, &c->steps[i])) == NULL) return -1;
        node->needs_value |= needs;
    }
    if (c->nsteps == 0) return 0;
    if (append_slot((void **)&node->tests, node->ntests, sizeof(Py_ssize_t)) < 0) return -1;
    node->tests[node->ntests++] = idx;
    return 0;
}

static void free_node_contents(Node *node)
{
    for (Py_ssize_t k = 0; k < node->nkids; k++) {
        free_node_contents(node->kids[k]);
        Py_XDECREF(node->kids[k]->step.name);
        PyMem_Free(node->kids[k]);
    }
    PyMem_Free(node->kids);
    PyMem_Free(node->tests);
    PyMem_Free(node->captures);
}

static PyObject *GuardSet_add(GuardSetObject *self, PyObject *args)
{
    PyObject *steps, *value, *text;
    const char *kind;
    if (!PyArg_ParseTuple(args, "O!sOU:add", &PyTuple_Type, &steps, &kind, &value, &text)) return NULL;
    Check c;
    memset(&c, 0, sizeof(c));
    c.kind = -1;
    for (int k = 0; k < N_KINDS; k++)
        if (strcmp(kind, KIND_NAMES[k]) == 0) c.kind = k;
    if (c.kind < 0) {
        PyErr_Format(PyExc_ValueError, "GuardSet.add: unknown check kind %s", kind);
        return NULL;
    }
    if (parse_steps(steps, &c) < 0) goto fail;
    if (c.nsteps == 0 && c.kind != PREDICATE && c.kind != ALIASING && c.kind != SHAPE_ENV) {
        PyErr_SetString(PyExc_ValueError, "GuardSet.add: only PREDICATE, ALIASING and SHAPE_ENV checks may have no steps");
        goto fail;
    }
    if (c.nsteps && c.kind == SHAPE_ENV) {
        PyErr_SetString(PyExc_ValueError, "GuardSet.add: SHAPE_ENV checks take no steps (their bindings read values)");
        goto fail;
    }
    c.text = Py_NewRef(text);
    switch (c.kind) {
    case TYPE_MATCH:
    case ID_MATCH:
        /* A weak reference where possible: the cache lives in co_extra, which the cyclic GC
         * cannot see, so a strong reference to a user object could keep it alive forever. */
        if (c.kind == TYPE_MATCH && !PyType_Check(value)) {
            PyErr_SetString(PyExc_TypeError, "TYPE_MATCH needs a type");
            goto fail;
        }
        c.value = PyWeakref_NewRef(value, NULL);
        if (c.value != NULL) c.weak = 1;
        else if (PyErr_ExceptionMatches(PyExc_TypeError)) { PyErr_Clear(); c.value = Py_NewRef(value); }
        else goto fail;
        break;
    case TENSOR_MATCH:
        if (parse_tensor_spec(value, &c) < 0) goto fail;
        break;
    case DICT_KEYS:
        if (!PyTuple_Check(value)) { PyErr_SetString(PyExc_TypeError, "DICT_KEYS needs a tuple of keys"); goto fail; }
        c.value = Py_NewRef(value);
        break;
    case EMPTY_ATTRS:
        if (!PyTuple_Check(value)) { PyErr_SetString(PyExc_TypeError, "EMPTY_ATTRS needs a tuple of names"); goto fail; }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(value); i++)
            if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(value, i))) {
                PyErr_SetString(PyExc_TypeError, "EMPTY_ATTRS needs a tuple of str");
                goto fail;
            }
        c.value = Py_NewRef(value);
        break;
    case LEN:
        if (!PyLong_Check(value)) { PyErr_SetString(PyExc_TypeError, "LEN needs an int"); goto fail; }
        c.value = Py_NewRef(value);
        break;
    case PREDICATE:
        if (!PyCallable_Check(value)) { PyErr_SetString(PyExc_TypeError, "PREDICATE needs a callable"); goto fail; }
        c.value = Py_NewRef(value);
        break;
    case EQUALS_MATCH: {
        /* Only immutable constants: a mutable one could change after the guard was made. */
        PyObject *stack[64];
        int top = 0;
        stack[top++] = value;
        while (top) {
            PyObject *o = stack[--top];
            if (PyTuple_CheckExact(o)) {
                for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o) && top < 64; i++) stack[top++] = PyTuple_GET_ITEM(o, i);
                if (top >= 64) { PyErr_SetString(PyExc_ValueError, "EQUALS_MATCH: tuple too large"); goto fail; }
            } else if (!(o == Py_None || PyBool_Check(o) || PyLong_CheckExact(o) || PyFloat_CheckExact(o) ||
                         PyUnicode_CheckExact(o))) {
                PyErr_Format(PyExc_TypeError, "EQUALS_MATCH takes None, bool, int, float, str or tuples of "
                             "these, not %.100s", Py_TYPE(o)->tp_name);
                goto fail;
            }
        }
        c.value = Py_NewRef(value);
        break;
    }
    case NOT_PRESENT:
        break;
    case SHAPE_ENV:
        if ((c.shapes = pyd_shape_program_parse(value)) == NULL) goto fail;
        break;
    case ALIASING: {
        PyObject *paths, *groups;
        PyObject *overlap = NULL;
        if (c.nsteps || !PyTuple_Check(value) || !PyArg_ParseTuple(value, "O!O!|O", &PyTuple_Type, &paths,
                                                                   &PyTuple_Type, &groups, &overlap) ||
            PyTuple_GET_SIZE(paths) != PyTuple_GET_SIZE(groups) || (overlap != NULL && !PyCallable_Check(overlap))) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "ALIASING takes no steps and (paths, groups[, overlap]): a tuple "
                            "of step tuples, a tuple of as many ints, and a callable taking the values");
            goto fail;
        }
        c.npaths = PyTuple_GET_SIZE(paths);
        c.paths = PyMem_Calloc(c.npaths ? c.npaths : 1, sizeof(*c.paths));
        if (c.paths == NULL) { PyErr_NoMemory(); goto fail; }
        for (Py_ssize_t p = 0; p < c.npaths; p++) {
            Check tmp;
            memset(&tmp, 0, sizeof(tmp));
            int r = parse_steps(PyTuple_GET_ITEM(paths, p), &tmp);
            c.paths[p].steps = tmp.steps;
            c.paths[p].nsteps = tmp.nsteps;
            if (r < 0) goto fail;
            c.paths[p].group = PyLong_AsLong(PyTuple_GET_ITEM(groups, p));
            if (c.paths[p].group == -1 && PyErr_Occurred()) goto fail;
            if (tmp.nsteps == 0) { PyErr_SetString(PyExc_ValueError, "ALIASING: an empty path"); goto fail; }
        }
        c.value = Py_NewRef(value);
        break;
    }
    }
    if (self->n == self->cap) {
        Py_ssize_t cap = self->cap ? self->cap * 2 : 8;
        Check *grown = PyMem_Realloc(self->checks, cap * sizeof(Check));
        if (grown == NULL) { PyErr_NoMemory(); goto fail; }
        self->checks = grown;
        self->cap = cap;
    }
    if (c.nsteps && c.steps[0].kind == ROOT_LOCAL && c.steps[0].index > self->max_local)
        self->max_local = c.steps[0].index;
    self->checks[self->n++] = c;
    if (tree_insert(self, self->n - 1) < 0) {
        free_check(&self->checks[--self->n]); /* a half-inserted check has no tests in the tree */
        return NULL;
    }
    Py_RETURN_NONE;
fail:
    free_check(&c);
    return NULL;
}

/* check(args, globals, builtins=None, closure=None): the same evaluation as the hit path, on
 * values given from Python (tests, tools). */
static int ctx_from_args(PyObject *args, PyObject *kw, PydGuardCtx *ctx, PyObject **holder)
{
    static char *names[] = {"args", "globals", "builtins", "closure", NULL};
    PyObject *list, *globals, *builtins = Py_None, *closure = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO!|OO", names, &list, &PyDict_Type, &globals, &builtins, &closure))
        return -1;
    *holder = PySequence_Fast(list, "args must be a sequence");
    if (*holder == NULL) return -1;
    ctx->locals = PySequence_Fast_ITEMS(*holder);
    ctx->nlocals = PySequence_Fast_GET_SIZE(*holder);
    ctx->globals = globals;
    ctx->builtins = PyDict_Check(builtins) ? builtins : NULL;
    ctx->closure = PyTuple_Check(closure) ? closure : NULL;
    return 0;
}

static PyObject *GuardSet_check(GuardSetObject *self, PyObject *args, PyObject *kw)
{
    PydGuardCtx ctx;
    PyObject *holder;
    if (ctx_from_args(args, kw, &ctx, &holder) < 0) return NULL;
    int ok = pyd_guardset_check((PyObject *)self, &ctx, NULL);
    Py_DECREF(holder);
    return PyBool_FromLong(ok);
}

static PyObject *GuardSet_first_failure(GuardSetObject *self, PyObject *args, PyObject *kw)
{
    PydGuardCtx ctx;
    PyObject *holder, *why = NULL;
    if (ctx_from_args(args, kw, &ctx, &holder) < 0) return NULL;
    int ok = pyd_guardset_check((PyObject *)self, &ctx, &why);
    Py_DECREF(holder);
    if (ok || why == NULL) Py_RETURN_NONE;
    return why;
}

static PyObject *GuardSet_texts(GuardSetObject *self, PyObject *unused)
{
    PyObject *out = PyList_New(self->n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < self->n; i++) PyList_SET_ITEM(out, i, Py_NewRef(self->checks[i].text));
    return out;
}

static PyObject *GuardSet_repr(GuardSetObject *self)
{
    PyObject *texts = GuardSet_texts(self, NULL), *sep = NULL, *body = NULL, *out = NULL;
    if (texts && (sep = PyUnicode_FromString("\n  ")) && (body = PyUnicode_Join(sep, texts)))
        out = PyUnicode_FromFormat("GuardSet(%zd checks)%s%U", self->n, self->n ? ":\n  " : "", body);
    Py_XDECREF(texts); Py_XDECREF(sep); Py_XDECREF(body);
    return out;
}

static Py_ssize_t GuardSet_len(GuardSetObject *self) { return self->n; }

static int GuardSet_init(GuardSetObject *self, PyObject *args, PyObject *kw)
{
    if (!PyArg_ParseTuple(args, ":GuardSet") || (kw && PyDict_GET_SIZE(kw))) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "GuardSet() takes no arguments");
        return -1;
    }
    self->max_local = -1;
    return 0;
}

static void GuardSet_dealloc(GuardSetObject *self)
{
    free_node_contents(&self->root);
    for (Py_ssize_t i = 0; i < self->n; i++) free_check(&self->checks[i]);
    PyMem_Free(self->checks);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef GuardSet_methods[] = {
    {"add", (PyCFunction)GuardSet_add, METH_VARARGS, "add(steps, kind, value, text): append one check"},
    {"check", (PyCFunction)(void (*)(void))GuardSet_check, METH_VARARGS | METH_KEYWORDS,
     "check(args, globals, builtins=None, closure=None) -> bool"},
    {"first_failure", (PyCFunction)(void (*)(void))GuardSet_first_failure, METH_VARARGS | METH_KEYWORDS,
     "first_failure(args, globals, builtins=None, closure=None) -> text of the first failing check, or None"},
    {"texts", (PyCFunction)GuardSet_texts, METH_NOARGS, "the readable text of every check, in order"},
    {NULL},
};

static PySequenceMethods GuardSet_as_sequence = {.sq_length = (lenfunc)GuardSet_len};

PyTypeObject PydGuardSet_Type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pydynamo._C.GuardSet",
    .tp_basicsize = sizeof(GuardSetObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Checks on a frame's arguments, globals and closure, evaluated in C (see pydynamo/_C.pyi).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)GuardSet_init,
    .tp_dealloc = (destructor)GuardSet_dealloc,
    .tp_repr = (reprfunc)GuardSet_repr,
    .tp_methods = GuardSet_methods,
    .tp_as_sequence = &GuardSet_as_sequence,
};

static PyObject *fast_tensor_guards(PyObject *m, PyObject *unused)
{
    return PyBool_FromLong(get_fast_api() != NULL);
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
