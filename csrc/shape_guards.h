/* SHAPE_ENV checks: symbolic-shape facts compiled to small int64 programs (shape_guards.c). */
#ifndef PYDYNAMO_SHAPE_GUARDS_H
#define PYDYNAMO_SHAPE_GUARDS_H

#include "guards.h"

typedef struct PydShapeProgram PydShapeProgram;

/* From a SHAPE_ENV check's value (see _C.pyi); NULL with an exception set. */
PydShapeProgram *pyd_shape_program_parse(PyObject *value);
void pyd_shape_program_free(PydShapeProgram *p);
/* 1 every fact holds, 0 not (*detail: the failing fact's text, or why nothing could be read).
 * Never leaves an exception set. */
int pyd_shape_program_check(const PydShapeProgram *p, const PydGuardCtx *ctx, const char **detail);

#endif
