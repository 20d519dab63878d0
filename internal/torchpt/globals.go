package torchpt

import "fmt"

// allowed are the globals a state dict's pickle may name. Nothing else is
// ever looked up, let alone called.
var allowed = map[global]bool{
	{"collections", "OrderedDict"}:         true,
	{"torch._utils", "_rebuild_tensor_v2"}: true,
	{"torch._utils", "_rebuild_tensor"}:    true,
	{"torch._utils", "_rebuild_parameter"}: true,
	{"torch", "FloatStorage"}:              true,
	{"torch", "HalfStorage"}:               true,
	{"torch", "BFloat16Storage"}:           true,
	{"torch", "DoubleStorage"}:             true,
	{"torch", "LongStorage"}:               true, // refused as a tensor's storage, with its name
	{"torch", "IntStorage"}:                true,
	{"torch", "BoolStorage"}:               true,
	{"torch", "ByteStorage"}:               true,
}

// lookup resolves a global against the allow-list.
func lookup(mod, name string) (global, error) {
	g := global{mod, name}
	if !allowed[g] {
		return g, fmt.Errorf("%w: the pickle references %s.%s (only tensors and ordered dicts are allowed)", ErrUnsafe, mod, name)
	}
	return g, nil
}

// call applies an allowed callable.
func call(g global, args tuple) (any, error) {
	switch g {
	case global{"collections", "OrderedDict"}:
		d := newDict()
		if len(args) == 0 {
			return d, nil
		}
		// OrderedDict([(k, v), ...]) from a list of pairs.
		l, ok := args[0].(*list)
		if len(args) != 1 || !ok {
			return nil, fmt.Errorf("OrderedDict with %d arguments", len(args))
		}
		for _, it := range l.items {
			kv, ok := it.(tuple)
			if !ok || len(kv) != 2 {
				return nil, fmt.Errorf("OrderedDict item is not a pair")
			}
			if err := d.set(kv[0], kv[1]); err != nil {
				return nil, err
			}
		}
		return d, nil
	case global{"torch._utils", "_rebuild_tensor_v2"}, global{"torch._utils", "_rebuild_tensor"}:
		// (storage, storage_offset, size, stride[, requires_grad, backward_hooks[, metadata]])
		if len(args) < 4 || len(args) > 7 {
			return nil, fmt.Errorf("%s with %d arguments", g.name, len(args))
		}
		return rebuildTensor(args[0], args[1], args[2], args[3])
	case global{"torch._utils", "_rebuild_parameter"}:
		// (data, requires_grad, backward_hooks)
		if len(args) != 3 {
			return nil, fmt.Errorf("_rebuild_parameter with %d arguments", len(args))
		}
		t, ok := args[0].(*tensorRef)
		if !ok {
			return nil, fmt.Errorf("_rebuild_parameter of %s", typeName(args[0]))
		}
		return t, nil
	}
	return nil, fmt.Errorf("%w: %s.%s is not callable", ErrUnsafe, g.module, g.name)
}

func rebuildTensor(storage, offset, size, stride any) (*tensorRef, error) {
	s, ok := storage.(*storageRef)
	if !ok {
		return nil, fmt.Errorf("tensor of %s, not a storage", typeName(storage))
	}
	off, ok := offset.(int64)
	if !ok || off < 0 {
		return nil, fmt.Errorf("tensor storage offset %v", offset)
	}
	shape, err := ints(size, "size")
	if err != nil {
		return nil, err
	}
	strides, err := ints(stride, "stride")
	if err != nil {
		return nil, err
	}
	if len(strides) != len(shape) {
		return nil, fmt.Errorf("tensor of %d dimensions with %d strides", len(shape), len(strides))
	}
	return &tensorRef{storage: s, offset: off, shape: shape, stride: strides}, nil
}

func ints(v any, what string) ([]int64, error) {
	t, ok := v.(tuple)
	if !ok {
		return nil, fmt.Errorf("tensor %s is %s, not a tuple", what, typeName(v))
	}
	out := make([]int64, len(t))
	for i, x := range t {
		n, ok := x.(int64)
		if !ok || n < 0 {
			return nil, fmt.Errorf("tensor %s %v", what, x)
		}
		out[i] = n
	}
	return out, nil
}

func setItems(d *dict, items []any) error {
	if len(items)%2 != 0 {
		return fmt.Errorf("setitems with an odd count %d", len(items))
	}
	for i := 0; i < len(items); i += 2 {
		if err := d.set(items[i], items[i+1]); err != nil {
			return err
		}
	}
	return nil
}
