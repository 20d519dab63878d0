package torchpt

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"slices"
	"strings"
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

func readZip(r io.ReaderAt, size int64, lim Limits) (map[string]Tensor, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	for _, f := range zr.File {
		if f.CompressedSize64 > uint64(size) {
			return nil, fmt.Errorf("%w: %s claims %d bytes in a file of %d", ErrFormat, f.Name, f.CompressedSize64, size)
		}
	}
	entries := make(map[string]*zip.File, len(zr.File))
	prefix := ""
	for _, f := range zr.File {
		entries[f.Name] = f
		if dir, ok := strings.CutSuffix(f.Name, "/data.pkl"); ok && !strings.Contains(dir, "/") {
			if prefix != "" {
				return nil, fmt.Errorf("%w: two pickles, %s/data.pkl and %s", ErrFormat, prefix, f.Name)
			}
			prefix = dir
		}
	}
	if prefix == "" {
		return nil, fmt.Errorf("%w: a zip archive without <name>/data.pkl: not a torch.save file", ErrFormat)
	}
	if bo, ok := entries[prefix+"/byteorder"]; ok {
		b, err := readEntry(bo, 16)
		if err != nil {
			return nil, err
		}
		if string(b) != "little" {
			return nil, fmt.Errorf("%w: byte order %q (only little-endian files are read)", ErrFormat, b)
		}
	}
	pkl, err := readEntry(entries[prefix+"/data.pkl"], maxPickle)
	if err != nil {
		return nil, err
	}
	st := &storages{lim: lim.maxBytes(), refs: map[string]*storageRef{}}
	obj, n, err := unpickle(pkl, st.load)
	if err != nil {
		return nil, pickleError("data.pkl", err)
	}
	if n != len(pkl) {
		return nil, fmt.Errorf("%w: data.pkl: %d bytes after the pickle", ErrFormat, len(pkl)-n)
	}
	data := make(map[*storageRef][]float32, len(st.refs))
	for _, ref := range st.refs {
		f, ok := entries[prefix+"/data/"+ref.key]
		if !ok {
			return nil, fmt.Errorf("%w: storage %s: no %s/data/%s in the archive", ErrFormat, ref.key, prefix, ref.key)
		}
		want := ref.numel * ref.dtype.size
		if f.UncompressedSize64 != uint64(want) {
			return nil, fmt.Errorf("%w: storage %s: %d bytes, want %d (%d x %s)", ErrFormat, ref.key, f.UncompressedSize64, want, ref.numel, ref.dtype.kind)
		}
		b, err := readEntry(f, want)
		if err != nil {
			return nil, err
		}
		if data[ref], err = decode(ref.dtype, b); err != nil {
			return nil, fmt.Errorf("%w: storage %s: %w", ErrFormat, ref.key, err)
		}
	}
	return stateDict(obj, data, lim.maxBytes())
}

// readEntry reads one zip entry of at most limit bytes. torch.save
// stores every record uncompressed (so storages can be mapped); requiring
// that keeps what is allocated within the file's own size, where a
// deflated entry could claim (or inflate to) far more.
func readEntry(f *zip.File, limit int64) ([]byte, error) {
	if f.Method != zip.Store || f.CompressedSize64 != f.UncompressedSize64 {
		return nil, fmt.Errorf("%w: %s is compressed (method %d): torch.save stores its records as they are", ErrFormat, f.Name, f.Method)
	}
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("%w: %s is %d bytes (limit %d)", ErrTooLarge, f.Name, f.UncompressedSize64, limit)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFormat, f.Name, err)
	}
	defer rc.Close()
	b := make([]byte, f.UncompressedSize64)
	if _, err := io.ReadFull(rc, b); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFormat, f.Name, err)
	}
	return b, nil
}

// legacyMagic is torch's MAGIC_NUMBER, the first pickle of a legacy file.
var legacyMagic, _ = new(big.Int).SetString("1950a86a20f9469cfc6c", 16)

func readLegacy(r io.ReaderAt, size int64, lim Limits) (map[string]Tensor, error) {
	if size > lim.maxBytes()+maxPickle {
		return nil, fmt.Errorf("%w: a legacy torch file of %d bytes", ErrTooLarge, size)
	}
	b := make([]byte, size)
	if _, err := r.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %w", ErrFormat, err)
	}
	next := func(what string, load func(any) (any, error)) (any, error) {
		v, n, err := unpickle(b, load)
		if err != nil {
			return nil, pickleError(what, err)
		}
		b = b[n:]
		return v, nil
	}
	magic, err := next("magic number", nil)
	if err != nil {
		return nil, err
	}
	if m, ok := magic.(*big.Int); !ok || m.Cmp(legacyMagic) != 0 {
		return nil, fmt.Errorf("%w: a pickle, but not a torch.save file (magic %v)", ErrFormat, magic)
	}
	if proto, err := next("protocol version", nil); err != nil {
		return nil, err
	} else if proto != int64(1001) {
		return nil, fmt.Errorf("%w: legacy protocol %v, want 1001", ErrFormat, proto)
	}
	info, err := next("system info", nil)
	if err != nil {
		return nil, err
	}
	if d, ok := info.(*dict); !ok || d.vals["little_endian"] != true {
		return nil, fmt.Errorf("%w: not saved on a little-endian machine", ErrFormat)
	}
	st := &storages{lim: lim.maxBytes(), refs: map[string]*storageRef{}}
	obj, err := next("data", st.load)
	if err != nil {
		return nil, err
	}
	keysV, err := next("storage keys", nil)
	if err != nil {
		return nil, err
	}
	keys, ok := keysV.(*list)
	if !ok {
		return nil, fmt.Errorf("%w: storage keys are %s, not a list", ErrFormat, typeName(keysV))
	}
	data := make(map[*storageRef][]float32, len(st.refs))
	for _, k := range keys.items {
		key, ok := k.(string)
		ref := st.refs[key]
		if !ok || ref == nil {
			return nil, fmt.Errorf("%w: storage key %v is not used by the data", ErrFormat, k)
		}
		if _, dup := data[ref]; dup {
			return nil, fmt.Errorf("%w: storage %s saved twice", ErrFormat, key)
		}
		if len(b) < 8 || int64(binary.LittleEndian.Uint64(b)) != ref.numel {
			return nil, fmt.Errorf("%w: storage %s: size record does not match its %d elements", ErrFormat, key, ref.numel)
		}
		b = b[8:]
		want := ref.numel * ref.dtype.size
		if int64(len(b)) < want {
			return nil, fmt.Errorf("%w: storage %s: truncated (%d of %d bytes)", ErrFormat, key, len(b), want)
		}
		if data[ref], err = decode(ref.dtype, b[:want]); err != nil {
			return nil, fmt.Errorf("%w: storage %s: %w", ErrFormat, key, err)
		}
		b = b[want:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last storage", ErrFormat, len(b))
	}
	if len(data) != len(st.refs) {
		return nil, fmt.Errorf("%w: %d storages used, %d saved", ErrFormat, len(st.refs), len(data))
	}
	return stateDict(obj, data, lim.maxBytes())
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

// decode converts little-endian storage bytes to float32.
func decode(dt dtype, b []byte) ([]float32, error) {
	if dt.name == "" {
		// Kept, to refuse the tensors of it by name; no values needed.
		return nil, nil
	}
	n := len(b) / int(dt.size)
	out := make([]float32, n)
	switch dt.name {
	case "F32":
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case "F64":
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	case "F16":
		for i := range out {
			out[i] = halfToFloat(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case "BF16":
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		}
	default:
		return nil, fmt.Errorf("element type %s", dt.name)
	}
	return out, nil
}

// halfToFloat converts an IEEE 754 binary16 value.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		// Subnormal: normalize it.
		e := uint32(127 - 15 + 1)
		for frac&0x400 == 0 {
			frac <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (frac&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
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
