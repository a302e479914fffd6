/* What guards.c (reading values, tests, evaluating a GuardSet) and guard_tree.c (building one
 * from Python: parsing checks, the tree, the GuardSet type) share. Private to the _C module: the
 * functions below are hidden like every other symbol of it. */
#ifndef PYDYNAMO_GUARDS_INTERNAL_H
#define PYDYNAMO_GUARDS_INTERNAL_H

#include "guards.h"
#include "tensor_guard.h"
#include "shape_guards.h"

/* STEP_METHOD_FUNC: an ("a", name), ("a", "__func__") pair fused when the steps are parsed: the
 * function `obj.name` binds, read without making the bound method (see read_method_func).
 * STEP_TYPE_LOOKUP ("t", name): the attribute a class finds along its MRO, as stored there (no
 * descriptor is called): what CPython's _PyType_Lookup answers, the first step of every
 * attribute read and special-method call on an instance.
 * STEP_GENERIC_ATTR ("g", name): object.__getattribute__(v, name), bypassing a Python
 * __getattribute__ of v's class (how such a class reads its own __dict__).
 * STEP_DICT_ITEM ("d", key): the raw entry of a dict or dict subclass instance (dict's own lookup:
 * a subclass's __getitem__ or __missing__ never runs); absent: the read fails.
 * STEP_DICT_WEAKKEY ("D", weakref.ref(key)): the raw entry of a dict for the referent of the weak
 * reference (a tensor key: the guard must not keep it alive); dead or absent: the read fails. Steps
 * of this kind are the same step only for the same weakref object.
 * ROOT_CONST ("K", obj): the object itself, held by the check (a class found as a dict's key, whose
 * identity another check pinned); what hangs below it guards the object's current state. */
enum { ROOT_LOCAL, ROOT_GLOBAL, ROOT_BUILTIN, ROOT_CLOSURE, ROOT_CONST, STEP_ATTR, STEP_ITEM, STEP_METHOD_FUNC,
       STEP_TYPE_LOOKUP, STEP_GENERIC_ATTR, STEP_WEAKREF, STEP_DICT_ITEM, STEP_DICT_WEAKKEY };
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
    PyObject *overrides_off;  /* torch._C.DisableTorchFunctionSubclass where the portable path must
                                 read with a subclass's __torch_function__ off; else NULL */
    PydFastTensorSpec spec;
} TensorSpec;

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

/* The C++ fast path, if pydynamo._tensor_guard was built and matches the running torch; NULL
 * otherwise (guards.c). */
const PydTensorGuardAPI *pyd_get_fast_api(void);

/* Parse a tuple of (kind, arg) steps into c->steps; 0, or -1 with an exception set (c may then
 * hold some steps: pyd_free_check releases them) (guard_tree.c). */
int pyd_parse_steps(PyObject *steps, Check *c);
/* Release what a check holds and zero it (guard_tree.c). */
void pyd_free_check(Check *c);

#endif
