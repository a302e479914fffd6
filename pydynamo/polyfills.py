"""Pure-Python reference implementations of C functions and classes of the standard library.

The translator inlines these as user code wherever a program calls the C callable they stand
for (``IMPLEMENTATIONS``, consulted by variables/builder.py through variables/stdlib.py): one
short function each instead of one tracker each. Each one must behave exactly as its C
original, observably: the same argument forms (the same positional-only and keyword-only
parameters), the same exceptions where the original raises, the same items in the same order,
and the same *laziness* (what a C iterator reads from its inputs at construction and at each
``next()``; generator functions here are split in two where the original does work at
construction). Where a case is not modelled, ``refuse(reason)`` makes it a graph break.

Iterator classes are generator functions (the tracker reports the C class as their type);
classes whose instances are callables with state (partial, itemgetter...) are ``Spec`` classes:
``new`` gives the instance's state (a dict of attributes; a leading underscore marks state only
the methods here may read), the other methods are the instance's methods, ``self`` being the
tracker, and ``rebuild`` says how the generated code makes the object again from its state
(``("func", "*args", "**keywords")``: ``cls(state["func"], *state["args"], **...)``). The C
containers of collections (deque, OrderedDict, defaultdict) are trackers of their own
(variables/lists.py, variables/dicts.py): their contents are trackers.

Everything here runs only inside traces: never call these functions directly.
"""
import builtins
import collections
import enum
import functools
import heapq
import itertools
import operator


class _Missing(enum.Enum):
    MISSING = 0


_MISSING = _Missing.MISSING  # a marker no program value can be (enum members are constants)


def refuse(reason):
    """A graph break: the translator raises Unsupported(reason) where this is called."""
    raise AssertionError("polyfills run only inside traces")


def made_in_trace(obj):
    """Whether ``obj`` is an object the trace created (answered by the translator)."""
    raise AssertionError("polyfills run only inside traces")


def _eq(a, b):
    """PyObject_RichCompareBool(a, b, Py_EQ): identity first."""
    return a is b or a == b


# ---- itertools ----------------------------------------------------------------------------

def chain(*iterables):
    for iterable in iterables:  # each one iter()'ed when reached, as chain does
        for item in iterable:
            yield item


def chain_from_iterable(iterable, /):
    return _chain_from(iter(iterable))


def _chain_from(source):
    for iterable in source:
        for item in iterable:
            yield item


def _index_or_none(value):
    if value is None:
        return None
    if type(value) is not int or value < 0:
        refuse("islice() with an index that is not a non-negative int or None")
    return value


def islice(iterable, *args):
    if len(args) == 1:
        start, stop, step = 0, _index_or_none(args[0]), 1
    elif len(args) in (2, 3):
        start, stop = _index_or_none(args[0]), _index_or_none(args[1])
        start = 0 if start is None else start
        step = 1 if len(args) == 2 or args[2] is None else args[2]
        if type(step) is not int or step < 1:
            refuse("islice() with a step that is not a positive int or None")
    else:
        refuse(f"islice() with {len(args) + 1} arguments")
    return _islice(iter(iterable), start, stop, step)


def _islice(it, start, stop, step):
    count, nxt = 0, start
    while True:
        while count < nxt:  # skip to the next index; the stop check comes before any read
            if next(it, _MISSING) is _MISSING:
                return
            count += 1
        if stop is not None and count >= stop:
            return
        item = next(it, _MISSING)
        if item is _MISSING:
            return
        count += 1
        nxt = nxt + step
        if stop is not None and nxt > stop:
            nxt = stop
        yield item


def accumulate(iterable, func=None, *, initial=None):
    return _accumulate(iter(iterable), func, initial)


def _accumulate(it, func, initial):
    first, total = initial is None, initial
    if not first:
        yield total  # before reading anything
    for item in it:
        if first:
            first, total = False, item
        else:
            total = total + item if func is None else func(total, item)
        yield total


def repeat(object, times=_MISSING):
    if times is _MISSING:
        return _repeat_forever(object)
    if type(times) is not int:
        refuse("repeat() with times that is not an int")
    return _repeat(object, times)


def _repeat_forever(obj):
    while True:
        yield obj


def _repeat(obj, times):
    for _ in range(times):
        yield obj


def count(start=0, step=1):
    if type(start) not in (int, float) or type(step) not in (int, float):
        refuse("count() of values other than int and float")
    return _count(start, step)


def _count(n, step):
    while True:
        yield n
        n = n + step


def groupby(iterable, key=None):
    return _groupby(iter(iterable), key)


# groupby's state, shared by the groups it hands out: [current key, current value, target key,
# number of the current group] (_MISSING where CPython has NULL)
def _groupby(it, keyfunc):
    st = [_MISSING, _MISSING, _MISSING, 0]
    while True:
        st[3] += 1  # the previous group is over
        while True:
            if st[0] is _MISSING:
                pass
            elif st[2] is _MISSING or not _eq(st[2], st[0]):
                break
            if not _groupby_step(st, it, keyfunc):
                return
        st[2] = st[0]
        yield st[0], _grouper(st, it, keyfunc, st[2], st[3])


def _groupby_step(st, it, keyfunc):
    value = next(it, _MISSING)
    if value is _MISSING:
        return False
    st[1] = value
    st[0] = value if keyfunc is None else keyfunc(value)
    return True


def _grouper(st, it, keyfunc, target, group):
    while st[3] == group:
        if st[1] is _MISSING and not _groupby_step(st, it, keyfunc):
            return
        if not _eq(target, st[0]):
            return
        value = st[1]
        st[0], st[1] = _MISSING, _MISSING
        yield value


def starmap(function, iterable, /):
    return _starmap(function, iter(iterable))


def _starmap(function, it):
    for args in it:
        yield function(*args)


def pairwise(iterable, /):
    return _pairwise(iter(iterable))


def _pairwise(it):
    old = next(it, _MISSING)
    if old is _MISSING:
        return
    for new in it:
        yield old, new
        old = new


def zip_longest(*iterables, fillvalue=None):
    return _zip_longest([iter(it) for it in iterables], fillvalue)


def _zip_longest(its, fillvalue):
    active = len(its)
    while active:
        values = []
        for i in range(len(its)):
            it = its[i]
            if it is None:
                values.append(fillvalue)
                continue
            value = next(it, _MISSING)
            if value is _MISSING:
                active -= 1
                if not active:
                    return
                its[i] = None
                value = fillvalue
            values.append(value)
        yield tuple(values)


def product(*iterables, repeat=1):
    if type(repeat) is not int or repeat < 0:
        refuse("product() with repeat that is not a non-negative int")
    pools = [tuple(pool) for pool in iterables] * repeat
    return _product(pools)


def _product(pools):
    result = [()]
    for pool in pools:
        result = [prefix + (item,) for prefix in result for item in pool]
    for prod in result:
        yield prod


def _r_arg(r, n, name):
    if r is None:
        return n
    if type(r) is not int:
        refuse(f"{name}() with r that is not an int")
    if r < 0:
        raise ValueError("r must be non-negative")
    return r


def permutations(iterable, r=None):
    pool = tuple(iterable)  # read whole at construction, as CPython does
    return _permutations(pool, _r_arg(r, len(pool), "permutations"))


def _permutations(pool, r):
    """The r-length orderings of pool's positions, in lexicographic order of the positions."""
    n = len(pool)
    if r > n:
        return
    for indices in _index_sequences(n, r, distinct=True):
        yield tuple(pool[i] for i in indices)


def _index_sequences(n, r, distinct):
    """Every r-tuple of range(n) (without repeats where ``distinct``), in lexicographic order."""
    if r == 0:
        yield ()
        return
    for first in range(n):
        for rest in _index_sequences(n, r - 1, distinct):
            if not distinct or first not in rest:
                yield (first,) + rest


def combinations(iterable, r):
    pool = tuple(iterable)
    return _combinations(pool, _r_arg(r, len(pool), "combinations"), False)


def combinations_with_replacement(iterable, r):
    pool = tuple(iterable)
    return _combinations(pool, _r_arg(r, len(pool), "combinations_with_replacement"), True)


def _combinations(pool, r, replace):
    """The r-length sorted selections of pool's positions (repeats allowed where ``replace``)."""
    n = len(pool)
    if not replace and r > n:
        return
    if replace and n == 0 and r:
        return
    for indices in _sorted_indices(n, r, 0, replace):
        yield tuple(pool[i] for i in indices)


def _sorted_indices(n, r, start, replace):
    if r == 0:
        yield ()
        return
    for first in range(start, n):
        for rest in _sorted_indices(n, r - 1, first if replace else first + 1, replace):
            yield (first,) + rest


def cycle(iterable, /):
    return _cycle(iter(iterable))


def _cycle(it):
    saved = []
    for item in it:  # the first pass reads the input lazily, saving each item
        yield item
        saved.append(item)
    while saved:
        for item in saved:
            yield item


def dict_fromkeys(iterable, value=None, /):
    d = {}
    for key in iterable:
        d[key] = value
    return d


def compress(data, selectors):
    return _compress(iter(data), iter(selectors))


def _compress(data, selectors):
    for datum in data:
        selector = next(selectors, _MISSING)
        if selector is _MISSING:
            return
        if selector:
            yield datum


def takewhile(predicate, iterable, /):
    return _takewhile(predicate, iter(iterable))


def _takewhile(predicate, it):
    for item in it:
        if not predicate(item):
            return
        yield item


def dropwhile(predicate, iterable, /):
    return _dropwhile(predicate, iter(iterable))


def _dropwhile(predicate, it):
    for item in it:
        if not predicate(item):
            yield item
            break
    for item in it:
        yield item


def filterfalse(function, iterable, /):
    return _filter(function, iter(iterable), False)


def filter(function, iterable, /):
    return _filter(function, iter(iterable), True)


def _filter(function, it, keep):
    for item in it:
        if bool(item if function is None else function(item)) is keep:
            yield item


def map(func, *iterables):
    if not iterables:
        refuse("map() must have at least two arguments")
    return _map(func, [iter(it) for it in iterables])


def _map(func, its):
    while True:
        args = []
        for it in its:
            value = next(it, _MISSING)
            if value is _MISSING:
                return
            args.append(value)
        yield func(*args)


def enumerate(iterable, start=0):
    if type(start) is not int:
        refuse("enumerate() with a start that is not an int")
    return _enumerate(iter(iterable), start)


def _enumerate(it, n):
    for item in it:
        yield n, item
        n += 1


def zip(*iterables, strict=False):
    return _zip([iter(it) for it in iterables], strict)


def _zip(its, strict):
    while its:
        items = []
        for i in range(len(its)):
            item = next(its[i], _MISSING)
            if item is _MISSING:
                if strict:
                    _zip_check(its, i)
                return
            items.append(item)
        yield tuple(items)


def _zip_check(its, i):
    """zip(strict=True) ended by argument ``i``: the others must end there too (the errors
    and reads of CPython's zip_next)."""
    if i:
        raise ValueError(f"zip() argument {i + 1} is shorter than argument{' ' if i == 1 else 's 1-'}{i}")
    for j in range(1, len(its)):
        if next(its[j], _MISSING) is not _MISSING:
            raise ValueError(f"zip() argument {j + 1} is longer than argument{' ' if j == 1 else 's 1-'}{j}")


# ---- collections --------------------------------------------------------------------------

def count_elements(mapping, iterable, /):
    """collections._count_elements, Counter's C helper: its slow path, whose reads and writes
    are those of its fast path on a Counter (which keeps dict's get and __setitem__)."""
    mapping_get = mapping.get
    for elem in iterable:
        mapping[elem] = mapping_get(elem, 0) + 1


# ---- heapq: the algorithms of heapq.py (the same comparisons, in the same order, as the C
# versions that replace them; heapify of more than 2500 items takes another order in C)

def _heap(heap):
    if not isinstance(heap, list):
        refuse("a heapq function on something other than a list")


def _siftdown(heap, startpos, pos, lt):
    newitem = heap[pos]
    while pos > startpos:
        parentpos = (pos - 1) >> 1
        parent = heap[parentpos]
        if lt(newitem, parent):
            heap[pos] = parent
            pos = parentpos
            continue
        break
    heap[pos] = newitem


def _siftup(heap, pos, lt=operator.lt):
    endpos, startpos, newitem = len(heap), pos, heap[pos]
    childpos = 2 * pos + 1
    while childpos < endpos:
        rightpos = childpos + 1
        if rightpos < endpos and not lt(heap[childpos], heap[rightpos]):
            childpos = rightpos
        heap[pos] = heap[childpos]
        pos = childpos
        childpos = 2 * pos + 1
    heap[pos] = newitem
    _siftdown(heap, startpos, pos, lt)


def _gt(a, b):
    return b < a  # heapq's max-heap helpers compare this way round


def heapify(x, /):
    _heap(x)
    if len(x) > 2500:
        refuse("heapify() of more than 2500 items")
    for i in reversed(range(len(x) // 2)):
        _siftup(x, i)


def heappush(heap, item, /):
    _heap(heap)
    heap.append(item)
    _siftdown(heap, 0, len(heap) - 1, operator.lt)


def heappop(heap, /):
    _heap(heap)
    last = heap.pop()
    if heap:
        item, heap[0] = heap[0], last
        _siftup(heap, 0)
        return item
    return last


def heapreplace(heap, item, /):
    _heap(heap)
    returned, heap[0] = heap[0], item
    _siftup(heap, 0)
    return returned


def heappushpop(heap, item, /):
    _heap(heap)
    if heap and heap[0] < item:
        item, heap[0] = heap[0], item
        _siftup(heap, 0)
    return item


def _heapify_max(x, /):
    _heap(x)
    if len(x) > 2500:
        refuse("heapify() of more than 2500 items")
    for i in reversed(range(len(x) // 2)):
        _siftup(x, i, _gt)


def _heappop_max(heap, /):
    _heap(heap)
    last = heap.pop()
    if heap:
        item, heap[0] = heap[0], last
        _siftup(heap, 0, _gt)
        return item
    return last


def _heapreplace_max(heap, item, /):
    _heap(heap)
    returned, heap[0] = heap[0], item
    _siftup(heap, 0, _gt)
    return returned


# ---- functools ----------------------------------------------------------------------------

def reduce(function, iterable, /, *initial):
    if len(initial) > 1:
        refuse(f"reduce() with {2 + len(initial)} arguments")
    it = iter(iterable)
    if initial:
        value = initial[0]
    else:
        value = next(it, _MISSING)
        if value is _MISSING:
            raise TypeError("reduce() of empty iterable with no initial value")
    for item in it:
        value = function(value, item)
    return value


class Spec:
    """Base of the state-and-methods descriptions of C classes (see the module docstring)."""


class partial(Spec):
    def new(func, /, *args, **keywords):
        if not callable(func):
            raise TypeError("the first argument must be callable")
        if isinstance(func, functools.partial):  # a partial of a partial is flattened...
            if not made_in_trace(func):  # ...unless it has an instance dict, unknown here
                refuse("functools.partial of a partial that existed before the frame")
            args = func.args + args
            keywords = {**func.keywords, **keywords}
            func = func.func
        return {"func": func, "args": args, "keywords": keywords}

    rebuild = ("func", "*args", "**keywords")

    def __call__(self, /, *args, **keywords):
        return self.func(*self.args, *args, **{**self.keywords, **keywords})


class itemgetter(Spec):
    def new(item, /, *items):
        return {"_items": (item,) + items}

    rebuild = ("*_items",)

    def __call__(self, obj, /):
        if len(self._items) == 1:
            return obj[self._items[0]]
        return tuple([obj[i] for i in self._items])


class attrgetter(Spec):
    def new(attr, /, *attrs):
        for name in (attr,) + attrs:
            if type(name) is not str:
                raise TypeError("attribute name must be a string")
        return {"_attrs": (attr,) + attrs}

    rebuild = ("*_attrs",)

    def __call__(self, obj, /):
        if len(self._attrs) == 1:
            return _dotted_getattr(obj, self._attrs[0])
        return tuple([_dotted_getattr(obj, name) for name in self._attrs])


def _dotted_getattr(obj, name):
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


class methodcaller(Spec):
    def new(name, /, *args, **kwargs):
        if type(name) is not str:
            raise TypeError("method name must be a string")
        return {"_name": name, "_args": args, "_kwargs": kwargs}

    rebuild = ("_name", "*_args", "**_kwargs")

    def __call__(self, obj, /):
        return getattr(obj, self._name)(*self._args, **self._kwargs)


# ---- object's pickling protocol (copy.copy / copy.deepcopy of a user's object) ------------
#
# object.__reduce_ex__, __reduce__ and __getstate__ of CPython's typeobject.c for instances of
# user classes (variables/objects.py calls these for them): the same attribute reads, in the
# same order, and the same result. The helpers below without a body are answered by the
# translator from the class (variables/stdlib.py), guarded.

def _reduce_overridden(obj):
    """Whether ``type(obj).__reduce__`` (read on the class) is not ``object.__reduce__``."""
    raise AssertionError("polyfills run only inside traces")


def _lookup_special(obj, name):
    """``_PyObject_LookupSpecial``: ``type(obj).<name>`` bound to ``obj``, or None."""
    raise AssertionError("polyfills run only inside traces")


def _is_default_getstate(obj, getstate):
    """Whether ``getstate`` is ``object.__getstate__`` bound to ``obj``."""
    raise AssertionError("polyfills run only inside traces")


def _instance_dict(obj):
    """``obj.__dict__`` (the real one, read without __getattribute__), None if absent or empty."""
    raise AssertionError("polyfills run only inside traces")


def _slotnames(obj, required):
    """``copyreg._slotnames(type(obj))`` (cached on the class as CPython caches it), after the
    checks object_getstate_default makes where ``required``."""
    raise AssertionError("polyfills run only inside traces")


def _copyreg(name):
    """``copyreg.<name>``, read as C code reads it (from the module, at each call)."""
    raise AssertionError("polyfills run only inside traces")


def object_reduce_ex(self, protocol, /):
    if type(protocol) is not int:
        refuse("object.__reduce_ex__ with a protocol that is not an int")
    reduce = getattr(self, "__reduce__", _MISSING)
    if reduce is not _MISSING and _reduce_overridden(self):
        return reduce()
    return _common_reduce(self, protocol)


def object_reduce(self, /):
    return _common_reduce(self, 0)


def _common_reduce(obj, protocol):
    if protocol < 2:
        refuse("object.__reduce_ex__ with pickle protocol < 2 (copyreg._reduce_ex) is not modelled")
    return _reduce_newobj(obj)


def _reduce_newobj(obj):
    cls = type(obj)
    args, kwargs = _new_arguments(obj)
    hasargs = args is not None
    if kwargs is None or len(kwargs) == 0:
        newobj = _copyreg("__newobj__")
        newargs = (cls, *args) if hasargs else (cls,)  # (not folded: cls keeps its source)
    else:
        newobj = _copyreg("__newobj_ex__")
        newargs = (cls, args, kwargs)
    is_list, is_dict = issubclass(cls, list), issubclass(cls, dict)
    state = _object_getstate(obj, not (hasargs or is_list or is_dict))
    listitems = iter(obj) if is_list else None
    dictitems = iter(obj.items()) if is_dict else None
    return (newobj, newargs, state, listitems, dictitems)


def _new_arguments(obj):
    getnewargs_ex = _lookup_special(obj, "__getnewargs_ex__")
    if getnewargs_ex is not None:
        newargs = getnewargs_ex()
        if not isinstance(newargs, tuple) or len(newargs) != 2:
            refuse("TypeError: __getnewargs_ex__ should return a tuple of length 2")
        args, kwargs = newargs
        if not isinstance(args, tuple) or not isinstance(kwargs, dict):
            refuse("TypeError: __getnewargs_ex__ should return (tuple, dict)")
        return args, kwargs
    getnewargs = _lookup_special(obj, "__getnewargs__")
    if getnewargs is not None:
        args = getnewargs()
        if not isinstance(args, tuple):
            refuse("TypeError: __getnewargs__ should return a tuple")
        return args, None
    return None, None


def _object_getstate(obj, required):
    getstate = getattr(obj, "__getstate__")
    if _is_default_getstate(obj, getstate):
        return _getstate_default(obj, required)
    return getstate()


def object_getstate(self, /):
    return _getstate_default(self, False)


def _getstate_default(obj, required):
    state = _instance_dict(obj)
    slotnames = _slotnames(obj, required)
    if slotnames:
        slots = {}
        for name in slotnames:
            value = getattr(obj, name, _MISSING)
            if value is not _MISSING:
                slots[name] = value
        if slots:
            state = (state, slots)
    return state


OBJECT_METHODS = {"__reduce_ex__": object_reduce_ex, "__reduce__": object_reduce,
                  "__getstate__": object_getstate}


IMPLEMENTATIONS = {
    itertools.chain: chain, itertools.chain.from_iterable: chain_from_iterable,
    itertools.islice: islice, itertools.accumulate: accumulate, itertools.repeat: repeat,
    itertools.count: count, itertools.groupby: groupby, itertools.starmap: starmap,
    itertools.pairwise: pairwise, itertools.zip_longest: zip_longest, itertools.product: product,
    itertools.compress: compress, itertools.takewhile: takewhile, itertools.dropwhile: dropwhile,
    itertools.filterfalse: filterfalse, builtins.filter: filter, builtins.map: map,
    itertools.permutations: permutations, itertools.combinations: combinations,
    itertools.combinations_with_replacement: combinations_with_replacement, itertools.cycle: cycle,
    dict.fromkeys: dict_fromkeys,
    # not intercepted by the builder: builtin.py's handlers call these for iterator arguments
    builtins.enumerate: enumerate, builtins.zip: zip,
    collections._count_elements: count_elements,
    heapq.heapify: heapify, heapq.heappush: heappush, heapq.heappop: heappop,
    heapq.heapreplace: heapreplace, heapq.heappushpop: heappushpop,
    heapq._heapify_max: _heapify_max, heapq._heappop_max: _heappop_max,
    heapq._heapreplace_max: _heapreplace_max,
    functools.reduce: reduce, functools.partial: partial,
    operator.itemgetter: itemgetter, operator.attrgetter: attrgetter,
    operator.methodcaller: methodcaller,
}
