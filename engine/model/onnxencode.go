package model

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"

	"google.golang.org/protobuf/encoding/protowire"
)

// encodeModel writes the model with nodes in place of the graph's, the
// initializers keep selects kept, extra added and the opsets set, copying
// every other field from the file.
func (f *onnxFile) encodeModel(nodes []*pbNode, keep func(*pbTensor) bool, extra []*pbTensor, opsets map[string]int64) ([]byte, error) {
	fh, err := os.Open(f.path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()

	var graph []span // file fields of the graph, in order
	var graphNew []byte
	for _, nd := range nodes {
		graphNew = protowire.AppendTag(graphNew, fieldNode, protowire.BytesType)
		graphNew = protowire.AppendBytes(graphNew, nd.encode())
	}
	for _, t := range f.inits {
		if keep(t) {
			graph = append(graph, t.field)
		}
	}
	graph = append(graph, f.graphRest...)
	for _, t := range extra {
		graphNew = protowire.AppendTag(graphNew, fieldInitializer, protowire.BytesType)
		graphNew = protowire.AppendBytes(graphNew, t.encode())
	}
	graphLen := int64(len(graphNew)) + spansLen(graph)

	head := f.head
	var opsetBytes []byte
	domains := make([]string, 0, len(opsets))
	for d := range opsets {
		domains = append(domains, d)
	}
	sort.Strings(domains)
	for _, d := range domains {
		var o []byte
		if d != "" {
			o = protowire.AppendTag(o, 1, protowire.BytesType)
			o = protowire.AppendString(o, d)
		}
		o = protowire.AppendTag(o, 2, protowire.VarintType)
		o = protowire.AppendVarint(o, uint64(opsets[d]))
		opsetBytes = protowire.AppendTag(opsetBytes, fieldOpset, protowire.BytesType)
		opsetBytes = protowire.AppendBytes(opsetBytes, o)
	}
	graphTag := protowire.AppendTag(nil, modelGraph, protowire.BytesType)
	graphTag = protowire.AppendVarint(graphTag, uint64(graphLen))

	total := spansLen(head) + int64(len(opsetBytes)) + int64(len(graphTag)) + graphLen
	if total > math.MaxInt32 {
		return nil, fmt.Errorf("rewritten model of %d bytes is over protobuf's 2 GB", total)
	}
	out := make([]byte, 0, total)
	if out, err = appendSpans(out, fh, head); err != nil {
		return nil, err
	}
	out = append(out, opsetBytes...)
	out = append(out, graphTag...)
	out = append(out, graphNew...)
	if out, err = appendSpans(out, fh, graph); err != nil {
		return nil, err
	}
	if int64(len(out)) != total {
		return nil, fmt.Errorf("rewritten model: wrote %d of %d bytes", len(out), total)
	}
	return out, nil
}

func spansLen(ss []span) int64 {
	var n int64
	for _, s := range ss {
		n += s.n
	}
	return n
}

func appendSpans(out []byte, r io.ReaderAt, ss []span) ([]byte, error) {
	for _, s := range ss {
		start := len(out)
		out = out[:start+int(s.n)]
		if _, err := r.ReadAt(out[start:], s.off); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// encode writes a node: the bytes read for an unchanged one.
func (nd *pbNode) encode() []byte {
	if nd.raw != nil {
		return nd.raw
	}
	var b []byte
	for _, in := range nd.inputs {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, in)
	}
	for _, out := range nd.outputs {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendString(b, out)
	}
	b = appendStr(b, 3, nd.name)
	b = appendStr(b, 4, nd.op)
	for _, a := range nd.attrs {
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, a.encode())
	}
	b = appendStr(b, 7, nd.domain)
	return b
}

func (a pbAttr) encode() []byte {
	b := appendStr(nil, 1, a.name)
	switch a.typ {
	case attrFloat:
		b = protowire.AppendTag(b, 2, protowire.Fixed32Type)
		b = protowire.AppendFixed32(b, math.Float32bits(a.f))
	case attrInt:
		b = protowire.AppendTag(b, 3, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(a.i))
	case attrString:
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, a.s)
	case attrTensor:
		b = protowire.AppendTag(b, 5, protowire.BytesType)
		b = protowire.AppendBytes(b, a.t.encode())
	case attrGraph:
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendBytes(b, a.g)
	case attrInts:
		var p []byte
		for _, v := range a.ints {
			p = protowire.AppendVarint(p, uint64(v))
		}
		b = protowire.AppendTag(b, 8, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
	}
	b = protowire.AppendTag(b, 20, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(a.typ))
}

// encode writes a new tensor with its data as raw_data.
func (t *pbTensor) encode() []byte {
	var b []byte
	if len(t.dims) > 0 {
		var p []byte
		for _, d := range t.dims {
			p = protowire.AppendVarint(p, uint64(d))
		}
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, p)
	}
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t.dtype))
	b = appendStr(b, 8, t.name)
	b = protowire.AppendTag(b, 9, protowire.BytesType)
	return protowire.AppendBytes(b, t.data)
}

func appendStr(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
