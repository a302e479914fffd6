/* Building a GuardSet from Python (pydynamo/guards.py): GuardSet.add parses a check's steps and
 * value, then puts the check in the tree that guards.c walks on every call; and the rest of the
 * GuardSet type (check / first_failure / texts for tests and tools, repr, dealloc). The types
 * shared with guards.c are in guards_internal.h; the protocol is documented in pydynamo/_C.pyi.
 */
#include "guards_internal.h"
#include <string.h>

/* ---------------------------------------------------------------- building from Python */

int pyd_parse_steps(PyObject *steps, Check *c)
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
        else if (!is_root && k[0] == 'w' && k[1] == 0) st->kind = STEP_WEAKREF;
        else if (!is_root && k[0] == 'd' && k[1] == 0) st->kind = STEP_DICT_ITEM;
        else if (!is_root && k[0] == 'D' && k[1] == 0) {
            if (!PyWeakref_CheckRefExact(arg)) {
                PyErr_Format(PyExc_TypeError, "GuardSet.add: step %R needs a weakref.ref", s);
                return -1;
            }
            st->kind = STEP_DICT_WEAKKEY;
        }
        else {
            PyErr_Format(PyExc_ValueError, "GuardSet.add: bad %s step %R (roots: L, G, B, C, K; then a, i, t, g, w, d, D)",
                         is_root ? "root" : "chain", s);
            return -1;
        }
        if (st->kind != STEP_ITEM && st->kind != STEP_DICT_ITEM && st->kind != STEP_DICT_WEAKKEY &&
            st->kind != ROOT_CONST && !PyUnicode_Check(arg)) {
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
    Py_XDECREF(t->overrides_off);
    PyMem_Free(t->sizes); PyMem_Free(t->strides); PyMem_Free(t);
}

/* For a subclass of torch's TensorBase: *reader = TensorBase (its getters read the tensor, not a
 * subclass's Python properties), and *overrides_off = DisableTorchFunctionSubclass when the type
 * has a __torch_function__ of its own (torch.Tensor has none that runs, Parameter's is disabled).
 * Other types (not torch objects) keep their own getters. 0, or -1 with an exception. */
static int tensor_base_of(PyObject *type, PyObject **reader, PyObject **overrides_off)
{
    PyObject *tc = PyImport_ImportModule("torch._C"), *torch_mod = NULL;
    if (tc == NULL) { PyErr_Clear(); return 0; }
    PyObject *base = PyObject_GetAttrString(tc, "TensorBase");
    PyObject *disabled = PyObject_GetAttrString(tc, "_disabled_torch_function_impl");
    PyObject *off = PyObject_GetAttrString(tc, "DisableTorchFunctionSubclass");
    PyObject *plain = NULL;
    int rc = -1;
    if (base == NULL || disabled == NULL || off == NULL) goto done;
    if (!PyType_Check(base) || !PyType_IsSubtype((PyTypeObject *)type, (PyTypeObject *)base)) { rc = 0; goto done; }
    *reader = base;
    if ((torch_mod = PyImport_ImportModule("torch")) == NULL || (plain = PyObject_GetAttrString(torch_mod, "Tensor")) == NULL)
        goto done;
    PyObject *key = PyUnicode_InternFromString("__torch_function__");
    if (key == NULL) goto done;
    PyObject *tf = _PyType_Lookup((PyTypeObject *)type, key); /* borrowed; a classmethod or the builtin */
    Py_DECREF(key);
    if (type != plain && tf != NULL && tf != disabled) *overrides_off = Py_NewRef(off);
    rc = 0;
done:
    Py_XDECREF(tc); Py_XDECREF(torch_mod); Py_XDECREF(base); Py_XDECREF(disabled); Py_XDECREF(off); Py_XDECREF(plain);
    return rc;
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
    PyObject *reader = type; /* whose getters the portable path calls */
    if (tensor_base_of(type, &reader, &t->overrides_off) < 0) return -1;
    if (!(t->d_dtype = lookup_descr(reader, "dtype")) || !(t->d_device = lookup_descr(reader, "device")) ||
        !(t->d_layout = lookup_descr(reader, "layout")) ||
        !(t->d_requires_grad = lookup_descr(reader, "requires_grad")) ||
        !(t->d_shape = lookup_descr(reader, "shape")) || !(t->d_stride = lookup_descr(reader, "stride")) ||
        !(t->d_is_inference = lookup_descr(reader, "is_inference")) ||
        !(t->d_is_conj = lookup_descr(reader, "is_conj")) || !(t->d_is_neg = lookup_descr(reader, "is_neg")))
        return -1;
    if (!PyTuple_Check(sizes)) { PyErr_SetString(PyExc_TypeError, "TENSOR_MATCH: sizes must be a tuple"); return -1; }
    t->ndim = PyTuple_GET_SIZE(sizes);
    if (parse_int_tuple(sizes, t->ndim, &t->sizes) < 0 || parse_int_tuple(strides, t->ndim, &t->strides) < 0)
        return -1;
    const PydTensorGuardAPI *api = pyd_get_fast_api();
    if (api != NULL && (rg == Py_True || rg == Py_False)) {
        if (api->encode(type, dtype, device, layout, &t->spec) == 0) {
            t->fast = 1;
            t->spec.flags = t->flags | (rg == Py_True ? PYD_TENSOR_REQUIRES_GRAD : 0);
        }
        else PyErr_Clear(); /* not torch objects: the portable path reports the mismatch */
    }
    return 0;
}

void pyd_free_check(Check *c)
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
    if (a->kind == ROOT_CONST || a->kind == STEP_DICT_WEAKKEY) return a->name == b->name;
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
    if (pyd_parse_steps(steps, &c) < 0) goto fail;
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
            int r = pyd_parse_steps(PyTuple_GET_ITEM(paths, p), &tmp);
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
        pyd_free_check(&self->checks[--self->n]); /* a half-inserted check has no tests in the tree */
        return NULL;
    }
    Py_RETURN_NONE;
fail:
    pyd_free_check(&c);
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
    for (Py_ssize_t i = 0; i < self->n; i++) pyd_free_check(&self->checks[i]);
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
