// Package heads computes BGE-M3's three outputs with FlagEmbedding's
// semantics: dense (L2-normalized CLS state), sparse (relu of a linear
// head per token, max per token id, special ids and non-positive weights
// dropped, sorted by id) and ColBERT (a linear head on every real token
// after CLS, L2-normalized per token).
//
// It works on plain float32 slices, either from a hidden-state export
// (heads computed here from [Weights]) or from a three-head export (only
// filtered and copied). Functions append into caller buffers so a hot loop
// allocates nothing.
//
// The ColBERT head is the only heavy one (a Dim x ColBERTDim matrix per
// token, a GMAC per 1k tokens for BGE-M3): it is a tiled GEMM, run by an
// AVX2+FMA kernel on x86-64 and by gonum's Sgemm elsewhere (or with the
// purego build tag). It imports nothing of the project; outside the
// standard library only gonum and golang.org/x/sys/cpu.
package heads
