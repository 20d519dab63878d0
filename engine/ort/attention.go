package ort

import (
	"fmt"
	"os"
	"strings"
)

// Attention is how a session computes attention ([Provider.Attention]).
type Attention string

// The attention forms. The zero value is [AttentionAuto].
const (
	// AttentionAuto is fused where it is known to pay and to be safe: the
	// CPU provider, when ONNX Runtime's flash kernel can run there (an L2
	// cache size is reported and ORT_DISABLE_FLASH_ATTENTION is unset).
	// CUDA keeps the graph (see AttentionFused); TensorRT always does.
	AttentionAuto Attention = "auto"
	// AttentionFused rewrites the model's attention blocks at load into
	// com.microsoft.MultiHeadAttention (see model.RewriteAttention), checked
	// by a canary run against the graph. On the CPU, MLAS's flash kernel
	// then never holds the heads×S×S scores; on CUDA, a chunk without
	// padding gets no mask (ORT's flash and memory-efficient kernels) and a
	// padded one a 1-D key-length mask. Not for TensorRT, which fuses
	// attention itself.
	AttentionFused Attention = "fused"
	// AttentionGraph runs the model's graph as exported.
	AttentionGraph Attention = "graph"
)

// ParseAttention reads an --attention value: auto, fused or graph.
func ParseAttention(s string) (Attention, error) {
	switch a := Attention(strings.ToLower(strings.TrimSpace(s))); a {
	case "", AttentionAuto:
		return AttentionAuto, nil
	case AttentionFused, AttentionGraph:
		return a, nil
	}
	return "", fmt.Errorf("attention %q (want auto, fused or graph)", s)
}

func (a Attention) orAuto() Attention {
	if a == "" {
		return AttentionAuto
	}
	return a
}

// CanaryTolerance is how far the rewritten graph's outputs may be from the
// graph's, at any real token, for the rewrite to be kept.
const CanaryTolerance = 1e-4

// AttentionPlan is how the sessions of one model on one provider compute
// attention: decided once per process (the rewrite, the flash conditions,
// the canary) by [PlanAttention] or the first [Open].
type AttentionPlan struct {
	// Fused is true when sessions run the rewritten graph.
	Fused bool
	// Requested is the --attention value the plan answers.
	Requested Attention
	// Blocks and FusedBlocks count the graph's softmax blocks and the ones
	// replaced.
	Blocks, FusedBlocks int
	// CanaryDiff is the largest difference the canary measured.
	CanaryDiff float64
	// Note says what was decided and why, for the start-up log; Warn
	// marks a note the operator should act on (a rewrite dropped, flash
	// off).
	Note string
	Warn bool
	// Precision is the sessions' arithmetic, decided after attention
	// (the int8 rewrite fuses attention too when the plan does).
	Precision PrecisionPlan
}

// String is the plan's start-up log line (attention only; the precision
// has its own, [PrecisionPlan.String]).
func (p AttentionPlan) String() string {
	form := "graph"
	if p.Fused {
		form = "fused"
	}
	return fmt.Sprintf("attention %s (--attention %s): %s", form, p.Requested, p.Note)
}

// flashDisabled reports whether ORT_DISABLE_FLASH_ATTENTION turns ONNX
// Runtime's flash kernels off (ORT reads it as a boolean: 1 or true).
func flashDisabled() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("ORT_DISABLE_FLASH_ATTENTION"))) {
	case "", "0", "false":
		return false
	}
	return true
}
