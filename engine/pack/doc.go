// Package pack bin-packs tokenized texts into padded chunks for session
// runs. It is pure: it sees only token counts, never texts or models, and
// imports nothing of the project.
//
// Texts are sorted by length and grouped by sequence tier, so a chunk is
// padded only up to the tier of its own longest text and never mixes texts
// that would pad less in a smaller tier. Each group is then split into
// chunks that stay under a padded-token budget, a batch-size cap and an
// optional workspace cost budget (a*B*S + b*B*S^2).
package pack
