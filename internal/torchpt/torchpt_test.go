package torchpt

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The files of testdata/ are torch.save outputs of
// scripts/gen-torch-fixtures.py: the same weight [3 4] and bias [3] in
// every layout and type torch writes.
func expected(t *testing.T) (w, b []float64) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Weight [][]float64
		Bias   []float64
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatal(err)
	}
	for _, r := range e.Weight {
		w = append(w, r...)
	}
	return w, e.Bias
}

func TestReadTorchFiles(t *testing.T) {
	w, b := expected(t)
	for _, tc := range []struct {
		file  string
		dtype string
		tol   float64 // relative
	}{
		{"zip_f32.pt", "F32", 0},
		{"zip_protocol4.pt", "F32", 0},
		{"legacy_f32.pt", "F32", 0},
		{"state_dict_metadata.pt", "F32", 0},
		{"parameter_dict.pt", "F32", 0},
		{"views.pt", "F32", 0},
		{"zip_f64.pt", "F64", 1e-7},
		{"zip_f16.pt", "F16", 1e-3},
		{"zip_bf16.pt", "BF16", 1e-2},
	} {
		t.Run(tc.file, func(t *testing.T) {
			ts, err := ReadFile(filepath.Join("testdata", tc.file), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if got := Names(ts); strings.Join(got, ",") != "bias,weight" {
				t.Fatalf("names %v, want bias, weight", got)
			}
			check := func(name string, shape []int, want []float64) {
				got := ts[name]
				if len(got.Shape) != len(shape) || !equalInts(got.Shape, shape) {
					t.Fatalf("%s shape %v, want %v", name, got.Shape, shape)
				}
				if got.DType != tc.dtype {
					t.Errorf("%s dtype %s, want %s", name, got.DType, tc.dtype)
				}
				for i, v := range want {
					if d := math.Abs(float64(got.Data[i]) - v); d > tc.tol*math.Abs(v)+1e-12 && float32(v) != got.Data[i] {
						t.Fatalf("%s[%d] = %v, want %v", name, i, got.Data[i], v)
					}
				}
			}
			check("weight", []int{3, 4}, w)
			check("bias", []int{3}, b)
		})
	}
}

func TestReadScalarAndEmpty(t *testing.T) {
	ts, err := ReadFile(filepath.Join("testdata", "scalar_empty.pt"), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if s := ts["scalar"]; len(s.Shape) != 0 || len(s.Data) != 1 || s.Data[0] != 2.5 {
		t.Errorf("scalar %+v, want shape [] data [2.5]", s)
	}
	if e := ts["empty"]; !equalInts(e.Shape, []int{0, 4}) || len(e.Data) != 0 {
		t.Errorf("empty %+v, want shape [0 4] and no data", e)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// pkl assembles a protocol 2 pickle from opcodes and operands.
type pkl struct{ bytes.Buffer }

func (p *pkl) op(b ...byte) *pkl { p.Write(b); return p }
func (p *pkl) global(mod, name string) *pkl {
	p.WriteByte('c')
	p.WriteString(mod + "\n" + name + "\n")
	return p
}
func (p *pkl) str(s string) *pkl {
	p.WriteByte('X')
	binary.Write(&p.Buffer, binary.LittleEndian, uint32(len(s)))
	p.WriteString(s)
	return p
}
func (p *pkl) int(n int32) *pkl {
	p.WriteByte('J')
	binary.Write(&p.Buffer, binary.LittleEndian, n)
	return p
}

// tensorPickle is {name: _rebuild_tensor_v2(storage key "0" of numel
// elements, offset, shape, stride, False, OrderedDict())}.
func tensorPickle(name, storageType string, numel, offset int32, shape, stride []int32) []byte {
	p := &pkl{}
	p.op(0x80, 2, '}', '(').str(name)
	p.global("torch._utils", "_rebuild_tensor_v2").op('(')
	p.op('(').str("storage").global("torch", storageType).str("0").str("cpu").int(numel).op('t', 'Q')
	p.int(offset).op('(')
	for _, n := range shape {
		p.int(n)
	}
	p.op('t', '(')
	for _, n := range stride {
		p.int(n)
	}
	p.op('t', 0x89).global("collections", "OrderedDict").op(')', 'R', 't', 'R', 'u', '.')
	return p.Bytes()
}

func torchZip(t testing.TB, pickle []byte, storages map[string][]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(name string, b []byte) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
	}
	add("archive/data.pkl", pickle)
	for k, b := range storages {
		add("archive/data/"+k, b)
	}
	add("archive/version", []byte("3\n"))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func f32s(vs ...float32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func read(b []byte, lim Limits) (map[string]Tensor, error) {
	return Read(bytes.NewReader(b), int64(len(b)), lim)
}

func TestReadSynthetic(t *testing.T) {
	// A transposed 2x3 view: storage [0 1 2 3 4 5] as shape (3, 2), stride (1, 3).
	b := torchZip(t, tensorPickle("w", "FloatStorage", 6, 0, []int32{3, 2}, []int32{1, 3}), map[string][]byte{"0": f32s(0, 1, 2, 3, 4, 5)})
	ts, err := read(b, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ts["w"].Data, []float32{0, 3, 1, 4, 2, 5}; !slicesEqual(got, want) {
		t.Errorf("transposed view %v, want %v", got, want)
	}
}

func slicesEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestReadRefusesHostileFiles: a .pt file is untrusted input. Every one of
// these must be refused with a clear error, never run code, panic or
// allocate what the file claims.
func TestReadRefusesHostileFiles(t *testing.T) {
	rce := (&pkl{}).op(0x80, 2).global("os", "system").str("touch /tmp/pwned").op(0x85, 'R', '.').Bytes()
	stackGlobal := (&pkl{}).op(0x80, 4, 0x8c, 8).op([]byte("builtins")...).op(0x8c, 4).op([]byte("eval")...).op(0x93, '.').Bytes()
	for _, tc := range []struct {
		name string
		file []byte
		lim  Limits
		want error
		msg  string
	}{
		{"os.system", torchZip(t, rce, nil), Limits{}, ErrUnsafe, "os.system"},
		{"stack global builtins.eval", torchZip(t, stackGlobal, nil), Limits{}, ErrUnsafe, "builtins.eval"},
		{"legacy os.system", append((&pkl{}).op(0x80, 2, 0x8a, 10, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19, '.').Bytes(), rce...), Limits{}, ErrUnsafe, "os.system"},
		{"huge storage", torchZip(t, tensorPickle("w", "FloatStorage", math.MaxInt32, 0, []int32{4}, []int32{1}), nil), Limits{}, ErrTooLarge, "storages of more than"},
		{"storage over the limit", torchZip(t, tensorPickle("w", "FloatStorage", 1024, 0, []int32{4}, []int32{1}), map[string][]byte{"0": make([]byte, 4096)}), Limits{MaxBytes: 1000}, ErrTooLarge, ""},
		{"view past the storage", torchZip(t, tensorPickle("w", "FloatStorage", 4, 2, []int32{4}, []int32{1}), map[string][]byte{"0": f32s(1, 2, 3, 4)}), Limits{}, ErrFormat, "reads past its storage"},
		{"stride past the storage", torchZip(t, tensorPickle("w", "FloatStorage", 4, 0, []int32{2, 2}, []int32{1 << 30, 1}), map[string][]byte{"0": f32s(1, 2, 3, 4)}), Limits{}, ErrFormat, "past its storage"},
		{"shape expands a small storage", torchZip(t, tensorPickle("w", "FloatStorage", 1, 0, []int32{1 << 20, 1 << 20}, []int32{0, 0}), map[string][]byte{"0": f32s(1)}), Limits{}, ErrTooLarge, "tensor shape"},
		{"stride 0 expands a small storage", torchZip(t, tensorPickle("w", "FloatStorage", 1, 0, []int32{1 << 13, 1 << 14}, []int32{0, 0}), map[string][]byte{"0": f32s(1)}), Limits{MaxBytes: 1 << 30}, ErrTooLarge, "tensor shape"},
		{"storage size mismatch", torchZip(t, tensorPickle("w", "FloatStorage", 4, 0, []int32{4}, []int32{1}), map[string][]byte{"0": f32s(1, 2)}), Limits{}, ErrFormat, "want 16"},
		{"missing storage", torchZip(t, tensorPickle("w", "FloatStorage", 4, 0, []int32{4}, []int32{1}), nil), Limits{}, ErrFormat, "no archive/data/0"},
		{"int tensor", torchZip(t, tensorPickle("w", "LongStorage", 2, 0, []int32{2}, []int32{1}), map[string][]byte{"0": make([]byte, 16)}), Limits{}, ErrFormat, "LongStorage"},
		{"unknown storage type", torchZip(t, tensorPickle("w", "QInt8Storage", 2, 0, []int32{2}, []int32{1}), nil), Limits{}, ErrUnsafe, "torch.QInt8Storage"},
		{"truncated pickle", torchZip(t, tensorPickle("w", "FloatStorage", 4, 0, []int32{4}, []int32{1})[:40], nil), Limits{}, ErrFormat, "data.pkl"},
		{"not a dict", torchZip(t, (&pkl{}).op(0x80, 2).int(7).op('.').Bytes(), nil), Limits{}, ErrFormat, "not a state dict"},
		{"empty memo", torchZip(t, (&pkl{}).op(0x80, 2, 'j', 0xff, 0xff, 0xff, 0xff, '.').Bytes(), nil), Limits{}, ErrFormat, "memo"},
		{"unknown opcode", torchZip(t, (&pkl{}).op(0x80, 2, 'i').Bytes(), nil), Limits{}, ErrFormat, "opcode"},
		{"string longer than the file", torchZip(t, (&pkl{}).op(0x80, 2, 'X', 0xff, 0xff, 0xff, 0x7f).Bytes(), nil), Limits{}, ErrFormat, "truncated"},
		{"not torch", []byte("hello world"), Limits{}, ErrFormat, "neither"},
		{"deflated storage", func() []byte {
			var buf bytes.Buffer
			zw := zip.NewWriter(&buf)
			w, _ := zw.CreateHeader(&zip.FileHeader{Name: "archive/data.pkl", Method: zip.Store})
			w.Write(tensorPickle("w", "FloatStorage", 1<<20, 0, []int32{4}, []int32{1}))
			w, _ = zw.CreateHeader(&zip.FileHeader{Name: "archive/data/0", Method: zip.Deflate})
			w.Write(make([]byte, 4<<20)) // a few KB deflated, 4 MiB inflated
			zw.Close()
			return buf.Bytes()
		}(), Limits{}, ErrFormat, "compressed"},
		{"zip without data.pkl", func() []byte {
			var buf bytes.Buffer
			zw := zip.NewWriter(&buf)
			w, _ := zw.Create("x/other")
			w.Write([]byte("x"))
			zw.Close()
			return buf.Bytes()
		}(), Limits{}, ErrFormat, "data.pkl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := read(tc.file, tc.lim)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want %v containing %q", err, tc.want, tc.msg)
			}
		})
	}
	if _, err := os.Stat("/tmp/pwned"); err == nil {
		t.Fatal("/tmp/pwned exists")
	}
}

// FuzzRead: no input may panic, hang or allocate past the limit.
func FuzzRead(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.pt"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(tensorPickle("w", "FloatStorage", 4, 0, []int32{2, 2}, []int32{2, 1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := read(b, Limits{MaxBytes: 1 << 20})
		if err != nil {
			return
		}
		for name, tn := range ts {
			n := 1
			for _, d := range tn.Shape {
				n *= d
			}
			if n != len(tn.Data) {
				t.Fatalf("%s: shape %v with %d values", name, tn.Shape, len(tn.Data))
			}
		}
	})
}

// FuzzPickle runs the pickle machine on data.pkl bytes (in an archive with
// one storage "0" of 16 floats), where FuzzRead's mutations mostly break
// the zip structure first.
func FuzzPickle(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "zip_*.pt"))
	for _, p := range files {
		zr, err := zip.OpenReader(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, e := range zr.File {
			if strings.HasSuffix(e.Name, "/data.pkl") {
				b, _ := readEntry(e, maxPickle)
				f.Add(b)
			}
		}
		zr.Close()
	}
	f.Add(tensorPickle("w", "FloatStorage", 16, 3, []int32{3, 4}, []int32{1, 3}))
	storage := map[string][]byte{"0": make([]byte, 64)}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = read(torchZip(t, b, storage), Limits{MaxBytes: 1 << 20})
	})
}
