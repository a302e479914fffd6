"""VariableTrackers, one module per family of Python values (see base.py for the contract)."""
from .base import NULL, CellVariable, GetAttrVariable, NullVariable, VariableTracker
from .builder import wrap_constant, wrap_value
from .builtin import BuiltinVariable, call_builtin
from .constant import ConstantVariable
from .ctx import GradModeVariable, WithExitVariable
from .dicts import DictVariable, DictViewVariable
from .functions import NestedUserFunctionVariable, UserFunctionVariable, UserMethodVariable
from .lists import (BaseListVariable, ListIteratorVariable, ListVariable, RangeVariable,
                    SizeVariable, SliceVariable, TupleVariable)
from .nn_module import NNModuleVariable
from .tensor import TensorVariable
from .torch import TorchVariable
from .user_defined import PythonModuleVariable, UserDefinedClassVariable, UserDefinedObjectVariable
