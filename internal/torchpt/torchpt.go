package torchpt

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
)

// Errors of [Read]; compare them with errors.Is.
var (
	// ErrUnsafe means the pickle names a global outside the allow-list
	// (anything but ordered dicts, tensors and float storages): the file
	// is refused before any of it is used.
	ErrUnsafe = errors.New("torchpt: refused pickle")
	// ErrFormat means the file is not a torch.save state dict this package
	// reads, or it is corrupt.
	ErrFormat = errors.New("torchpt: unsupported or corrupt file")
	// ErrTooLarge means the file asks for more memory than [Limits] allows.
	ErrTooLarge = errors.New("torchpt: over the size limit")
)

// Tensor is a dense tensor converted to float32, row-major.
type Tensor struct {
	Shape []int
	Data  []float32
	// DType is the saved element type: F32, F16, BF16 or F64.
	DType string
}

// Limits bound what one file may make [Read] allocate.
type Limits struct {
	// MaxBytes caps the storage bytes read and the float32 bytes of the
	// tensors built from them, each (0: [DefaultMaxBytes]).
	MaxBytes int64
}

// DefaultMaxBytes is the default [Limits.MaxBytes]: 64 times BGE-M3's
// ColBERT head.
const DefaultMaxBytes = 256 << 20

// maxPickle caps data.pkl: a state dict's pickle is a few hundred bytes a
// tensor.
const maxPickle = 16 << 20

func (l Limits) maxBytes() int64 {
	if l.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return l.MaxBytes
}

// ReadFile reads the state dict at path. Errors name the file.
func ReadFile(path string, lim Limits) (map[string]Tensor, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	ts, err := Read(f, st.Size(), lim)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ts, nil
}

// Read reads a state dict (a dict of name to tensor, as torch.save of
// module.state_dict() writes) of size bytes from r, in the zip or the legacy
// format.
func Read(r io.ReaderAt, size int64, lim Limits) (map[string]Tensor, error) {
	head := make([]byte, 4)
	if _, err := r.ReadAt(head, 0); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	switch {
	case bytes.Equal(head, []byte("PK\x03\x04")):
		return readZip(r, size, lim)
	case head[0] == 0x80:
		return readLegacy(r, size, lim)
	}
	return nil, fmt.Errorf("%w: neither a torch zip archive nor a legacy torch pickle (starts %q)", ErrFormat, head)
}

// dtype is a storage's element type.
type dtype struct {
	name string // F32, F16, BF16, F64; "" for types jetembed does not read
	size int64
	kind string // torch's name, for errors
}

var storageTypes = map[string]dtype{
	"FloatStorage":    {"F32", 4, "FloatStorage"},
	"HalfStorage":     {"F16", 2, "HalfStorage"},
	"BFloat16Storage": {"BF16", 2, "BFloat16Storage"},
	"DoubleStorage":   {"F64", 8, "DoubleStorage"},
	"LongStorage":     {"", 8, "LongStorage"},
	"IntStorage":      {"", 4, "IntStorage"},
	"BoolStorage":     {"", 1, "BoolStorage"},
	"ByteStorage":     {"", 1, "ByteStorage"},
}

// storages collects the persistent ids of one pickle.
type storages struct {
	lim   int64
	refs  map[string]*storageRef
	total int64
}

func (s *storages) load(pid any) (any, error) {
	t, ok := pid.(tuple)
	if !ok || len(t) < 5 || len(t) > 6 || t[0] != "storage" {
		return nil, fmt.Errorf("persistent id %s is not a storage", typeName(pid))
	}
	g, ok := t[1].(global)
	dt, known := storageTypes[g.name]
	if !ok || g.module != "torch" || !known {
		return nil, fmt.Errorf("storage type %s", typeName(t[1]))
	}
	key, ok := t[2].(string)
	if !ok || key == "" || len(key) > 64 {
		return nil, fmt.Errorf("storage key %v", t[2])
	}
	numel, ok := t[4].(int64)
	if !ok || numel < 0 {
		return nil, fmt.Errorf("storage %s has %v elements", key, t[4])
	}
	if len(t) == 6 && t[5] != nil {
		return nil, fmt.Errorf("storage %s is a view of another (torch < 0.4): save it again", key)
	}
	if prev, ok := s.refs[key]; ok {
		if prev.dtype != dt || prev.numel != numel {
			return nil, fmt.Errorf("storage %s saved twice with different types or sizes", key)
		}
		return prev, nil
	}
	if numel > s.lim/dt.size || s.total+numel*dt.size > s.lim {
		return nil, fmt.Errorf("%w: storages of more than %d bytes", ErrTooLarge, s.lim)
	}
	s.total += numel * dt.size
	ref := &storageRef{dtype: dt, key: key, numel: numel}
	s.refs[key] = ref
	return ref, nil
}

// pickleError keeps ErrUnsafe and ErrTooLarge, and calls the rest
// ErrFormat.
func pickleError(what string, err error) error {
	if errors.Is(err, ErrUnsafe) || errors.Is(err, ErrTooLarge) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrFormat, what, err)
}

// stateDict turns the unpickled object into named tensors.
func stateDict(obj any, data map[*storageRef][]float32, limit int64) (map[string]Tensor, error) {
	d, ok := obj.(*dict)
	if !ok {
		return nil, fmt.Errorf("%w: the file holds a %s, not a state dict", ErrFormat, typeName(obj))
	}
	out := make(map[string]Tensor, len(d.keys))
	// A tensor may view its storage more than once (stride 0, shared
	// storages), but a state dict does not blow a few bytes up into
	// gigabytes: the tensors hold at most 4x the elements saved.
	var saved int64
	for ref := range data {
		saved += ref.numel
	}
	budget := min(limit/4, 4*saved+1024)
	for _, k := range d.keys {
		name, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("%w: state dict key %v is not a string", ErrFormat, k)
		}
		tr, ok := d.vals[k].(*tensorRef)
		if !ok {
			return nil, fmt.Errorf("%w: %q is a %s, not a tensor", ErrFormat, name, typeName(d.vals[k]))
		}
		t, err := materialize(tr, data[tr.storage], &budget)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// materialize copies a tensor's elements out of its storage, following its
// offset and strides, after checking they stay inside it.
func materialize(t *tensorRef, storage []float32, budget *int64) (Tensor, error) {
	if t.storage.dtype.name == "" {
		return Tensor{}, fmt.Errorf("%w: a tensor of torch.%s (only float16, bfloat16, float32 and float64 are read)", ErrFormat, t.storage.dtype.kind)
	}
	numel := int64(1)
	last := t.offset // the highest storage index the tensor reads
	for i, n := range t.shape {
		if n == 0 {
			numel = 0
			break
		}
		if numel > *budget/n {
			return Tensor{}, fmt.Errorf("%w: tensor shape %v", ErrTooLarge, t.shape)
		}
		numel *= n
		if t.stride[i] > 0 && (n-1) > (math.MaxInt64-last)/t.stride[i] {
			return Tensor{}, fmt.Errorf("%w: tensor strides %v overflow", ErrFormat, t.stride)
		}
		last += (n - 1) * t.stride[i]
	}
	shape := make([]int, len(t.shape))
	for i, n := range t.shape {
		shape[i] = int(n)
	}
	if numel == 0 {
		return Tensor{Shape: shape, Data: []float32{}, DType: t.storage.dtype.name}, nil
	}
	if last >= int64(len(storage)) {
		return Tensor{}, fmt.Errorf("%w: tensor shape %v, stride %v at offset %d reads past its storage of %d elements",
			ErrFormat, t.shape, t.stride, t.offset, len(storage))
	}
	*budget -= numel
	out := make([]float32, numel)
	if contiguous(t.shape, t.stride) {
		copy(out, storage[t.offset:t.offset+numel])
	} else {
		idx := make([]int64, len(t.shape))
		for i := range out {
			at := t.offset
			for d, x := range idx {
				at += x * t.stride[d]
			}
			out[i] = storage[at]
			for d := len(idx) - 1; d >= 0; d-- {
				if idx[d]++; idx[d] < t.shape[d] {
					break
				}
				idx[d] = 0
			}
		}
	}
	return Tensor{Shape: shape, Data: out, DType: t.storage.dtype.name}, nil
}

func contiguous(shape, stride []int64) bool {
	want := int64(1)
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] != 1 && stride[d] != want {
			return false
		}
		want *= shape[d]
	}
	return true
}

// Names returns the tensor names of ts, sorted.
func Names(ts map[string]Tensor) []string {
	names := make([]string, 0, len(ts))
	for n := range ts {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
