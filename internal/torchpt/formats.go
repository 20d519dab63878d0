package torchpt

import (
	"archive/zip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"strings"
)

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
