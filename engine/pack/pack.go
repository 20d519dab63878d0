package pack

import (
	"errors"
	"fmt"
	"slices"
)

// Config bounds the chunks a [Packer] makes.
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
	// Cost is the workspace model; chunks whose cost exceeds MaxCost are
	// split. MaxCost 0 disables the cost budget.
	Cost    Cost
	MaxCost float64
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
	case c.MaxCost < 0:
		return fmt.Errorf("%w: max cost %g < 0", ErrConfig, c.MaxCost)
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

// Chunk is one padded session run.
type Chunk struct {
	// Items index the lengths given to [Packer.Pack], longest first.
	Items []int
	// Seq is the padded sequence length; Batch is len(Items).
	Seq        int
	RealTokens int
}

// Batch is the number of rows of the chunk.
func (c Chunk) Batch() int { return len(c.Items) }

// PaddedTokens is Batch*Seq.
func (c Chunk) PaddedTokens() int { return len(c.Items) * c.Seq }

// Packer packs lengths into chunks. It reuses its buffers between calls,
// so one Packer must not be used by two goroutines at once; the chunks it
// returns are valid until the next call.
type Packer struct {
	cfg    Config
	order  []int
	items  []int
	chunks []Chunk
}

// New returns a Packer for cfg.
func New(cfg Config) (*Packer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Tiers = slices.Clone(cfg.Tiers)
	return &Packer{cfg: cfg}, nil
}

// Config returns the packer's configuration.
func (p *Packer) Config() Config { return p.cfg }

// Pack packs texts of the given token counts. Lengths <= 0 are skipped
// (they are items that failed before packing).
func (p *Packer) Pack(lengths []int) []Chunk {
	p.order = p.order[:0]
	for i, n := range lengths {
		if n > 0 {
			p.order = append(p.order, i)
		}
	}
	// Longest first, ties in input order, so results are deterministic.
	slices.SortStableFunc(p.order, func(a, b int) int { return lengths[b] - lengths[a] })

	// All chunk items live in one backing array; chunks are sub-slices.
	p.items = append(p.items[:0], p.order...)
	p.chunks = p.chunks[:0]
	for start := 0; start < len(p.items); {
		seq := p.cfg.Tier(lengths[p.items[start]])
		end := start + 1
		for end < len(p.items) && p.cfg.Tier(lengths[p.items[end]]) == seq {
			end++
		}
		p.split(p.items[start:end], lengths, seq)
		start = end
	}
	return p.chunks
}

// split cuts one tier group into the fewest chunks that fit the budgets,
// of near-equal batch size so they spread evenly over sessions.
func (p *Packer) split(group, lengths []int, seq int) {
	perChunk := p.rowsFor(seq)
	n := (len(group) + perChunk - 1) / perChunk
	base, extra := len(group)/n, len(group)%n
	for i := 0; i < n; i++ {
		size := base
		if i < extra {
			size++
		}
		items := group[:size:size]
		group = group[size:]
		real := 0
		for _, it := range items {
			real += lengths[it]
		}
		p.chunks = append(p.chunks, Chunk{Items: items, Seq: seq, RealTokens: real})
	}
}

// rowsFor is the most rows a chunk of seq may have; at least 1.
func (p *Packer) rowsFor(seq int) int {
	rows := min(p.cfg.MaxBatch, p.cfg.MaxTokens/seq)
	if p.cfg.MaxCost > 0 {
		for rows > 1 && p.cfg.Cost.Of(rows, seq) > p.cfg.MaxCost {
			rows--
		}
	}
	return max(rows, 1)
}
