//go:build cgo

package onnxgen

import (
	"path/filepath"
	"testing"
)

func TestSmoke(t *testing.T) {
	for _, layout := range []Layout{LayoutHidden, LayoutHeads} {
		dir := genDir(t, Config{Size: Tiny, Layout: layout, Seed: 1})
		s := openSession(t, filepath.Join(dir, "model.onnx"), layout, 1)
		res := s.run(t, [][]int64{{0, 5, 6, 7, 2}, {0, 9, 2}})
		for i, r := range res {
			t.Logf("%s %s %v %v", layout, s.outputs[i], r.shape, r.data[:min(8, len(r.data))])
		}
	}
}
