/* The optional fast TENSOR_MATCH: a C++ module (tensor_guard.cpp) built against torch's headers
 * when torch is importable at build time, reached from guards.c through a capsule. Without it
 * guards.c reads tensor metadata through Python-level getters (correct, about 10x slower). */
#ifndef PYDYNAMO_TENSOR_GUARD_H
#define PYDYNAMO_TENSOR_GUARD_H

#include <Python.h>
#include <stdint.h>

#define PYD_TENSOR_GUARD_CAPSULE "pydynamo._tensor_guard._api"
#define PYD_TENSOR_GUARD_API_VERSION 2

/* The boolean properties TENSOR_MATCH pins, as bits of PydFastTensorSpec.flags. */
#define PYD_TENSOR_REQUIRES_GRAD 1
#define PYD_TENSOR_INFERENCE 2 /* t.is_inference() */
#define PYD_TENSOR_CONJ 4      /* t.is_conj() */
#define PYD_TENSOR_NEG 8       /* t.is_neg() */

typedef struct {
    int32_t dtype;        /* c10::ScalarType */
    int32_t device_type;  /* c10::DeviceType */
    int32_t device_index; /* -1: none */
    int32_t layout;       /* c10::Layout */
    int32_t flags;        /* PYD_TENSOR_* bits the tensor must have, exactly (set by the caller) */
} PydFastTensorSpec;

typedef struct {
    int version;
    /* A tensor type and Python dtype / device / layout objects -> spec (but its flags); 0, or -1
     * with an exception set (then the portable path must be used: e.g. the type is not a torch
     * tensor). */
    int (*encode)(PyObject *type, PyObject *dtype, PyObject *device, PyObject *layout, PydFastTensorSpec *spec);
    /* `tensor` must be a torch.Tensor (or subclass) instance. 1 match, 0 mismatch (*detail names
     * what differs), -1 error (no exception set). Sizes / strides equal to INT64_MIN are not checked. */
    int (*check)(PyObject *tensor, const PydFastTensorSpec *spec, const int64_t *sizes, const int64_t *strides,
                 Py_ssize_t ndim, const char **detail);
} PydTensorGuardAPI;

#endif
