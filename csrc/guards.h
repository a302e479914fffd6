/* GuardSet: a list of checks on a frame's arguments, globals and closure, evaluated in C. */
#ifndef PYDYNAMO_GUARDS_H
#define PYDYNAMO_GUARDS_H

#include "cpython_compat.h"

/* Where the values that guards read come from. `locals` are the frame's localsplus slots
 * (at function entry only the argument slots hold values). */
typedef struct {
    PyObject *const *locals;
    Py_ssize_t nlocals;
    PyObject *globals;
    PyObject *builtins;
    PyObject *closure; /* tuple of cells, or NULL */
} PydGuardCtx;

extern PyTypeObject PydGuardSet_Type;

/* 1 if every check holds, 0 if not. Never leaves an exception set. If `why` is not NULL and a
 * check fails, *why receives a new reference to a str naming the failed check. */
int pyd_guardset_check(PyObject *guardset, const PydGuardCtx *ctx, PyObject **why);

/* 1 if a check of this GuardSet holds a weak reference whose object has died (the set can
 * never pass again); 0 otherwise, or for anything that is not a GuardSet. */
int pyd_guardset_is_dead(PyObject *guardset);

/* The highest argument slot any check reads, or -1. */
Py_ssize_t pyd_guardset_max_local(PyObject *guardset);

int pyd_guards_init(PyObject *module);

/* A chain of steps (a root, then getattr / getitem steps) read outside a check (shape_guards.c). */
typedef struct PydChain PydChain;
PydChain *pyd_chain_parse(PyObject *steps);  /* NULL with an exception set */
void pyd_chain_free(PydChain *chain);
/* New reference to the value the chain reads, or NULL (never with an exception set). */
PyObject *pyd_chain_read(const PydChain *chain, const PydGuardCtx *ctx);
/* Interned method names, borrowed. */
PyObject *pyd_str_size(void);
PyObject *pyd_str_stride(void);
PyObject *pyd_str_storage_offset(void);

#endif
