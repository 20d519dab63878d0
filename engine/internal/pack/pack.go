package pack

import (
	"errors"
	"fmt"
	"slices"
)

// Config bounds the chunks the engine's scheduler forms.
type Config struct {
	// MaxTokens bounds Batch*Seq, the padded tokens of one chunk. A single
	// text longer than MaxTokens still gets a chunk of its own.
	MaxTokens int
	// MaxBatch bounds the texts of one chunk.
	MaxBatch int
	// Tiers are the padded sequence lengths chunks may have, ascending. A
	// chunk's Seq is the smallest tier that holds its longest text; a text
	// longer than the last tier is padded to its own length.
	Tiers []int
}

// ErrConfig reports an unusable [Config].
var ErrConfig = errors.New("pack: invalid config")

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.MaxTokens <= 0:
		return fmt.Errorf("%w: max tokens %d <= 0", ErrConfig, c.MaxTokens)
	case c.MaxBatch <= 0:
		return fmt.Errorf("%w: max batch %d <= 0", ErrConfig, c.MaxBatch)
	case len(c.Tiers) == 0:
		return fmt.Errorf("%w: no sequence tiers", ErrConfig)
	}
	for i, t := range c.Tiers {
		if t <= 0 || (i > 0 && t <= c.Tiers[i-1]) {
			return fmt.Errorf("%w: tiers must be positive and strictly ascending: %v", ErrConfig, c.Tiers)
		}
	}
	return nil
}

// Tier returns the padded length for a text of n tokens: the smallest tier
// >= n, or n itself beyond the last tier.
func (c Config) Tier(n int) int {
	i, _ := slices.BinarySearch(c.Tiers, n)
	if i == len(c.Tiers) {
		return n
	}
	return c.Tiers[i]
}
