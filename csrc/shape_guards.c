/* SHAPE_ENV checks: the facts a trace with symbolic sizes relied on (s0 == s1, 2 <= s0,
 * s0 % 8 == 0), evaluated in C on every call (pydynamo/shapes.py compiles them from the
 * ShapeEnv; the value format is documented in pydynamo/_C.pyi).
 *
 * A program reads its symbols' values once per evaluation (a tensor's size / stride / storage
 * offset, or an int argument), then runs each fact as a small postfix program over int64 with
 * Python's semantics (floor division and modulo). Anything that cannot be computed exactly (an
 * overflow, a division by zero, a value that is not an int) fails the check: a shape guard never
 * passes by accident.
 */
#include "shape_guards.h"
#include <string.h>

enum { PROP_INT, PROP_SIZE, PROP_STRIDE, PROP_OFFSET };
enum { OP_VAR, OP_CONST, OP_ADD, OP_SUB, OP_MUL, OP_FLOORDIV, OP_MOD, OP_POW, OP_EQ, OP_NE, OP_LT,
       OP_LE, OP_GT, OP_GE, OP_AND, OP_OR, OP_NOT, OP_NEG, OP_MIN, OP_MAX, OP_ABS };
static const char *const OP_NAMES[] = {"v", "c", "+", "-", "*", "//", "%", "**", "==", "!=", "<",
                                       "<=", ">", ">=", "and", "or", "not", "neg", "min", "max", "abs"};
#define N_OPS ((int)(sizeof(OP_NAMES) / sizeof(OP_NAMES[0])))
#define MAX_STACK 64

typedef struct {
    PydChain *chain;
    int prop;
    Py_ssize_t dim;
} Binding;

typedef struct {
    int op;
    int64_t arg;
} Op;

typedef struct {
    Op *ops;
    Py_ssize_t nops;
    PyObject *text;
} Fact;

struct PydShapeProgram {
    Binding *bindings;
    Py_ssize_t nbindings;
    Fact *facts;
    Py_ssize_t nfacts;
};

/* ---------------------------------------------------------------- building */

void pyd_shape_program_free(PydShapeProgram *p)
{
    if (p == NULL) return;
    for (Py_ssize_t i = 0; i < p->nbindings; i++) pyd_chain_free(p->bindings[i].chain);
    for (Py_ssize_t i = 0; i < p->nfacts; i++) {
        PyMem_Free(p->facts[i].ops);
        Py_XDECREF(p->facts[i].text);
    }
    PyMem_Free(p->bindings);
    PyMem_Free(p->facts);
    PyMem_Free(p);
}

static int parse_binding(PyObject *b, Binding *out)
{
    PyObject *steps;
    const char *prop;
    if (!PyTuple_Check(b) || !PyArg_ParseTuple(b, "O!sn", &PyTuple_Type, &steps, &prop, &out->dim)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "SHAPE_ENV: a binding is (steps, 'int'|'size'|'stride'|'storage_offset', dim), "
                     "not %R", b);
        return -1;
    }
    if (strcmp(prop, "int") == 0) out->prop = PROP_INT;
    else if (strcmp(prop, "size") == 0) out->prop = PROP_SIZE;
    else if (strcmp(prop, "stride") == 0) out->prop = PROP_STRIDE;
    else if (strcmp(prop, "storage_offset") == 0) out->prop = PROP_OFFSET;
    else {
        PyErr_Format(PyExc_ValueError, "SHAPE_ENV: unknown binding property %s", prop);
        return -1;
    }
    if (PyTuple_GET_SIZE(steps) == 0) {
        PyErr_SetString(PyExc_ValueError, "SHAPE_ENV: a binding needs steps");
        return -1;
    }
    out->chain = pyd_chain_parse(steps);
    return out->chain == NULL ? -1 : 0;
}

/* Parse a program and check that it leaves exactly one value, never underflows, and reads
 * only bindings that exist. */
static int parse_fact(PyObject *f, Py_ssize_t nbindings, Fact *out)
{
    PyObject *program, *text;
    if (!PyTuple_Check(f) || !PyArg_ParseTuple(f, "O!U", &PyTuple_Type, &program, &text)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "SHAPE_ENV: a fact is (program tuple, text)");
        return -1;
    }
    out->text = Py_NewRef(text);
    out->nops = PyTuple_GET_SIZE(program);
    out->ops = PyMem_Calloc(out->nops ? out->nops : 1, sizeof(Op));
    if (out->ops == NULL) { PyErr_NoMemory(); return -1; }
    int depth = 0;
    for (Py_ssize_t i = 0; i < out->nops; i++) {
        PyObject *item = PyTuple_GET_ITEM(program, i), *arg = NULL;
        const char *name;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 1 || PyTuple_GET_SIZE(item) > 2 ||
            (name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(item, 0))) == NULL) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "SHAPE_ENV: bad instruction %R", item);
            return -1;
        }
        Op *op = &out->ops[i];
        op->op = -1;
        for (int k = 0; k < N_OPS; k++)
            if (strcmp(name, OP_NAMES[k]) == 0) op->op = k;
        if (op->op < 0) {
            PyErr_Format(PyExc_ValueError, "SHAPE_ENV: unknown instruction %s", name);
            return -1;
        }
        if (op->op == OP_VAR || op->op == OP_CONST) {
            if (PyTuple_GET_SIZE(item) != 2 || !PyLong_Check(arg = PyTuple_GET_ITEM(item, 1))) {
                PyErr_Format(PyExc_TypeError, "SHAPE_ENV: %s needs an int argument", name);
                return -1;
            }
            op->arg = PyLong_AsLongLong(arg);
            if (op->arg == -1 && PyErr_Occurred()) return -1;
            if (op->op == OP_VAR && (op->arg < 0 || op->arg >= nbindings)) {
                PyErr_Format(PyExc_ValueError, "SHAPE_ENV: binding %lld does not exist", (long long)op->arg);
                return -1;
            }
            depth++;
        } else if (op->op == OP_NOT || op->op == OP_NEG || op->op == OP_ABS) {
            if (depth < 1) goto underflow;
        } else {
            if (depth < 2) goto underflow;
            depth--;
        }
        if (depth > MAX_STACK) {
            PyErr_SetString(PyExc_ValueError, "SHAPE_ENV: expression too deep");
            return -1;
        }
    }
    if (depth != 1) goto underflow;
    return 0;
underflow:
    PyErr_Format(PyExc_ValueError, "SHAPE_ENV: program for %U does not leave exactly one value", text);
    return -1;
}

PydShapeProgram *pyd_shape_program_parse(PyObject *value)
{
    PyObject *bindings, *facts;
    if (!PyTuple_Check(value) || !PyArg_ParseTuple(value, "O!O!", &PyTuple_Type, &bindings, &PyTuple_Type, &facts)) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "SHAPE_ENV value must be (bindings tuple, facts tuple)");
        return NULL;
    }
    PydShapeProgram *p = PyMem_Calloc(1, sizeof(PydShapeProgram));
    if (p == NULL) return (PydShapeProgram *)PyErr_NoMemory();
    Py_ssize_t nb = PyTuple_GET_SIZE(bindings), nf = PyTuple_GET_SIZE(facts);
    p->bindings = PyMem_Calloc(nb ? nb : 1, sizeof(Binding));
    p->facts = PyMem_Calloc(nf ? nf : 1, sizeof(Fact));
    if (p->bindings == NULL || p->facts == NULL) {
        pyd_shape_program_free(p);
        return (PydShapeProgram *)PyErr_NoMemory();
    }
    for (; p->nbindings < nb; p->nbindings++)
        if (parse_binding(PyTuple_GET_ITEM(bindings, p->nbindings), &p->bindings[p->nbindings]) < 0) goto fail;
    for (; p->nfacts < nf; p->nfacts++)
        if (parse_fact(PyTuple_GET_ITEM(facts, p->nfacts), nb, &p->facts[p->nfacts]) < 0) {
            p->nfacts++; /* free what was parsed of it */
            goto fail;
        }
    return p;
fail:
    pyd_shape_program_free(p);
    return NULL;
}

/* ---------------------------------------------------------------- evaluating */

/* 0 and *out set, or -1 (the value cannot be read as an exact int). Never leaves an exception. */
static int read_binding(const Binding *b, const PydGuardCtx *ctx, int64_t *out)
{
    PyObject *v = pyd_chain_read(b->chain, ctx), *x = NULL;
    if (v == NULL) return -1;
    switch (b->prop) {
    case PROP_INT:
        x = PyLong_CheckExact(v) ? Py_NewRef(v) : NULL;
        break;
    case PROP_SIZE:
    case PROP_STRIDE: {
        PyObject *arg = PyLong_FromSsize_t(b->dim);
        if (arg != NULL)
            x = PyObject_CallMethodOneArg(v, b->prop == PROP_SIZE ? pyd_str_size() : pyd_str_stride(), arg);
        Py_XDECREF(arg);
        break;
    }
    case PROP_OFFSET:
        x = PyObject_CallMethodNoArgs(v, pyd_str_storage_offset());
        break;
    }
    Py_DECREF(v);
    int r = -1;
    if (x != NULL && PyLong_Check(x)) {
        int overflow = 0;
        long long n = PyLong_AsLongLongAndOverflow(x, &overflow);
        if (!overflow && !(n == -1 && PyErr_Occurred())) {
            *out = n;
            r = 0;
        }
    }
    Py_XDECREF(x);
    PyErr_Clear();
    return r;
}

static int floor_div(int64_t a, int64_t b, int64_t *q, int64_t *m)
{
    if (b == 0 || (a == INT64_MIN && b == -1)) return -1;
    int64_t qq = a / b, mm = a % b;
    if (mm != 0 && ((mm < 0) != (b < 0))) { qq -= 1; mm += b; }
    *q = qq; *m = mm;
    return 0;
}

static int int_pow(int64_t base, int64_t exp, int64_t *out)
{
    if (exp < 0) return -1;
    int64_t r = 1;
    while (exp--)
        if (__builtin_mul_overflow(r, base, &r)) return -1;
    *out = r;
    return 0;
}

/* 1 holds, 0 does not, -1 cannot be computed (a failure too). */
static int run_fact(const Fact *f, const int64_t *vals)
{
    int64_t st[MAX_STACK + 1];
    int sp = 0;
    for (Py_ssize_t i = 0; i < f->nops; i++) {
        const Op *op = &f->ops[i];
        if (op->op == OP_VAR) { st[sp++] = vals[op->arg]; continue; }
        if (op->op == OP_CONST) { st[sp++] = op->arg; continue; }
        int64_t *a = &st[sp - 1];
        if (op->op == OP_NOT) { *a = !*a; continue; }
        if (op->op == OP_NEG) { if (*a == INT64_MIN) return -1; *a = -*a; continue; }
        if (op->op == OP_ABS) { if (*a == INT64_MIN) return -1; *a = *a < 0 ? -*a : *a; continue; }
        int64_t y = st[--sp], *x = &st[sp - 1], q, m;
        switch (op->op) {
        case OP_ADD: if (__builtin_add_overflow(*x, y, x)) return -1; break;
        case OP_SUB: if (__builtin_sub_overflow(*x, y, x)) return -1; break;
        case OP_MUL: if (__builtin_mul_overflow(*x, y, x)) return -1; break;
        case OP_FLOORDIV: if (floor_div(*x, y, &q, &m) < 0) return -1; *x = q; break;
        case OP_MOD: if (floor_div(*x, y, &q, &m) < 0) return -1; *x = m; break;
        case OP_POW: if (int_pow(*x, y, x) < 0) return -1; break;
        case OP_EQ: *x = *x == y; break;
        case OP_NE: *x = *x != y; break;
        case OP_LT: *x = *x < y; break;
        case OP_LE: *x = *x <= y; break;
        case OP_GT: *x = *x > y; break;
        case OP_GE: *x = *x >= y; break;
        case OP_AND: *x = *x && y; break;
        case OP_OR: *x = *x || y; break;
        case OP_MIN: *x = *x < y ? *x : y; break;
        case OP_MAX: *x = *x > y ? *x : y; break;
        default: return -1;
        }
    }
    return st[0] != 0;
}

int pyd_shape_program_check(const PydShapeProgram *p, const PydGuardCtx *ctx, const char **detail)
{
    int64_t small[16], *vals = small;
    if (p->nbindings > 16 && (vals = PyMem_Malloc(p->nbindings * sizeof(int64_t))) == NULL) {
        PyErr_Clear();
        *detail = "out of memory";
        return 0;
    }
    int ok = 1;
    for (Py_ssize_t i = 0; i < p->nbindings && ok; i++)
        if (read_binding(&p->bindings[i], ctx, &vals[i]) < 0) {
            *detail = "a size could not be read as an int";
            ok = 0;
        }
    for (Py_ssize_t i = 0; i < p->nfacts && ok; i++) {
        int r = run_fact(&p->facts[i], vals);
        if (r != 1) {
            *detail = PyUnicode_AsUTF8(p->facts[i].text); /* kept alive by the program */
            if (*detail == NULL) { PyErr_Clear(); *detail = "a shape fact"; }
            ok = 0;
        }
    }
    if (vals != small) PyMem_Free(vals);
    return ok;
}
