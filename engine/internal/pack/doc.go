// Package pack holds the shapes and costs of padded session runs: the
// sequence tiers a chunk is padded to ([Tiers], [Config.Tier]), the budgets
// of one chunk ([Config]: padded tokens and rows) and the cost model
// a*B*S + b*B*S^2 with its least-squares fit ([Cost], [Fit]), which the
// engine uses for run time and workspace alike. The engine's scheduler
// forms the chunks from these (engine's sched.go pulls, chunk.go forms);
// pack itself never sees texts or models.
//
// It is pure and imports nothing of the project.
package pack
