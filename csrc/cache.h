/* Per-code state kept in the code object's extra slot: cache entries (newest first) and the
 * SKIP mark. Freed with the code object; reset() empties every one of them. */
#ifndef PYDYNAMO_CACHE_H
#define PYDYNAMO_CACHE_H

#include "cpython_compat.h"

typedef struct {
    PyObject_HEAD
    PyObject *guards;  /* GuardSet, or a callable taking the dict of the frame's arguments */
    PyObject *code;    /* runs in place of the original code; same arguments and free variables */
    const void *orig_code; /* identity only (never dereferenced): the code this entry belongs to */
    Py_ssize_t hits;       /* calls it served: per-code counters for pydynamo.debug, free to keep */
    PyObject *key;         /* who compiled it (the setting's cache_key: backend and options), or NULL;
                              it serves only a setting with the same key (or a run-only one) */
} CacheEntryObject;

extern PyTypeObject PydCacheEntry_Type;

typedef struct ExtraState {
    PyObject *entries; /* list of CacheEntry, newest first; NULL when empty */
    int skip;          /* never intercept this code */
    PyObject *skip_keys; /* list of the keys (settings' cache_key) for which it is never intercepted, or NULL */
    int entry_code;    /* this is the code of a cache entry: always skipped */
    struct ExtraState *prev, *next; /* all live states, for reset() */
} ExtraState;

/* Borrowed, or NULL if the code has no state yet. */
ExtraState *pyd_extra_get(PyCodeObject *code);
/* Creates the state on first use; NULL with an exception set on failure. */
ExtraState *pyd_extra_get_or_create(PyCodeObject *code);
/* Adds an entry as the newest; 0 or -1 with an exception. */
int pyd_extra_add_entry(PyCodeObject *code, PyObject *entry);

int pyd_cache_init(PyObject *module);
extern PyMethodDef pyd_cache_methods[];
extern Py_ssize_t pyd_live_extra_states;

#endif
