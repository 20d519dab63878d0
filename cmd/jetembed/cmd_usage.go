package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetembed/jetembed/internal/telemetry"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

func init() {
	register(command{
		name:    "usage",
		summary: "what each tenant used, per hour: jobs, failures by code, texts, tokens, padded tokens, compute seconds (from the usage stream)",
		run:     runUsage,
	})
}

func runUsage(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("usage", io)
	nf := addNATSFlags(fs)
	d := jetstream.DefaultConfig()
	stream := fs.String("usage-stream", d.Usage.Name, "name of the usage stream")
	since := fs.Duration("since", 24*time.Hour, "sum the usage of this long before now (0: all the stream keeps)")
	tenant := fs.String("tenant", "", "one tenant's usage only (empty: every tenant's)")
	namesFile := fs.String("tenant-names", "", "JWT mode: a key -> name file (tenants.tsv, as the commands of tenant add --jwt write it: key TAB name a line) to show tenants by name; --tenant may then be a name")
	total := fs.Bool("total", false, "one row per tenant for the whole span instead of one per tenant and hour")
	asJSON := fs.Bool("json", false, "one JSON object per row instead of a table")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on the whole command")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: usage takes no arguments", errUsage)
	}
	if *since < 0 {
		return fmt.Errorf("%w: --since %v is negative", errUsage, *since)
	}
	var names map[string]string
	if *namesFile != "" {
		var err error
		if names, err = readTenantNames(*namesFile); err != nil {
			return fmt.Errorf("%w: --tenant-names: %v", errUsage, err)
		}
	}
	// A name stands for each of its keys (a rotated key is the same
	// tenant), and its rows are summed under the name.
	var tenants []string
	if *tenant != "" {
		tenants = keysOf([]string{*tenant}, names)
	}
	for _, t := range tenants {
		if !schema.ValidTenant(t) {
			return fmt.Errorf("%w: --tenant %q is not a tenant (one subject token)", errUsage, t)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	nc, err := jetstream.Connect(ctx, nf.options(slog.New(slog.NewTextHandler(io.err, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	q := jetstream.UsageQuery{Stream: *stream, Tenants: tenants, Total: *total}
	if *since > 0 {
		q.Since = time.Now().Add(-*since)
	}
	rep, err := jetstream.ReadUsage(ctx, js, q)
	if err != nil {
		return err
	}
	rep.Rows = byName(rep.Rows, names)
	if rep.Skipped > 0 {
		fmt.Fprintf(io.err, "warning: %d messages of %s are no usage event; skipped\n", rep.Skipped, *stream)
	}
	if *asJSON {
		enc := json.NewEncoder(io.out)
		for _, r := range rep.Rows {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	return usageTable(io, rep, *total)
}

// usageTable prints the rows, then each tenant's total when the rows are
// hourly and a tenant has several.
func usageTable(io stdio, rep jetstream.UsageReport, total bool) error {
	tw := tabwriter.NewWriter(io.out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "HOUR (UTC)\tTENANT\tJOBS\tFAILED\tTEXTS\tTOKENS\tPADDED\tCOMPUTE S\tCACHED TEXTS\tCACHED TOKENS\tFAILURES\t")
	line := func(hour string, r jetstream.UsageRow) {
		failed, codes := int64(0), make([]string, 0, len(r.Failed))
		for _, c := range slices.Sorted(maps.Keys(r.Failed)) {
			failed += r.Failed[c]
			codes = append(codes, fmt.Sprintf("%s=%d", c, r.Failed[c]))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.3f\t%d\t%d\t%s\t\n", hour, tenantLabel(r.Tenant), r.Jobs, failed,
			r.Texts, r.Tokens, r.PaddedTokens, r.ComputeSeconds, r.CachedTexts, r.CachedTokens, strings.Join(codes, ","))
	}
	sums := map[string]*jetstream.UsageRow{}
	for _, r := range rep.Rows {
		hour := "all"
		if !total {
			hour = r.Hour.Format("2006-01-02T15")
		}
		line(hour, r)
		s := sums[r.Tenant]
		if s == nil {
			s = &jetstream.UsageRow{Tenant: r.Tenant}
			sums[r.Tenant] = s
		}
		s.Jobs, s.Requests, s.Texts = s.Jobs+r.Jobs, s.Requests+r.Requests, s.Texts+r.Texts
		s.Tokens, s.PaddedTokens, s.ComputeSeconds = s.Tokens+r.Tokens, s.PaddedTokens+r.PaddedTokens, s.ComputeSeconds+r.ComputeSeconds
		s.CachedTexts, s.CachedTokens = s.CachedTexts+r.CachedTexts, s.CachedTokens+r.CachedTokens
		for c, n := range r.Failed {
			if s.Failed == nil {
				s.Failed = map[schema.Code]int64{}
			}
			s.Failed[c] += n
		}
	}
	if !total && len(rep.Rows) > len(sums) {
		for _, t := range slices.Sorted(maps.Keys(sums)) {
			line("total", *sums[t])
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(io.err, "%d usage events of %d tenants\n", rep.Events, len(sums))
	return nil
}

// tenantLabel shows a job without a tenant as the metrics label it.
func tenantLabel(t string) string {
	if t == "" {
		return telemetry.TenantNone
	}
	return t
}

// readTenantNames reads a key -> name file: a key, a tab and a name a
// line (blank lines skipped); a later line of a key wins, as appending
// to the file means. A name follows `tenant add`'s rule (so it is a
// valid, short metrics label that cannot be a reserved one such as
// *other, the default * or a key) and names no other key of the file.
func readTenantNames(file string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	names := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		key, name, ok := strings.Cut(strings.TrimSuffix(line, "\r"), "\t")
		if !ok || !schema.ValidTenant(key) || !tenantName.MatchString(name) {
			return nil, fmt.Errorf("%s:%d: want a key, a tab and a name (%s): %q", file, i+1, tenantName, line)
		}
		names[key] = name
	}
	for key, name := range names {
		if _, ok := names[name]; ok {
			return nil, fmt.Errorf("%s: the name %q of %s is a key of the file", file, name, key)
		}
	}
	return names, nil
}

// byName labels rows by tenant name and sums the rows of one name's keys
// for the same hour; the order (hour, then tenant) is kept.
func byName(rows []jetstream.UsageRow, names map[string]string) []jetstream.UsageRow {
	if len(names) == 0 {
		return rows
	}
	type key struct {
		hour   time.Time
		tenant string
	}
	at := map[key]int{}
	out := rows[:0:0]
	for _, r := range rows {
		if n, ok := names[r.Tenant]; ok {
			r.Tenant = n
		}
		k := key{r.Hour, r.Tenant}
		if i, ok := at[k]; ok {
			out[i].Merge(r)
			continue
		}
		at[k] = len(out)
		out = append(out, r)
	}
	slices.SortStableFunc(out, func(a, b jetstream.UsageRow) int {
		if c := a.Hour.Compare(b.Hour); c != 0 {
			return c
		}
		return strings.Compare(a.Tenant, b.Tenant)
	})
	return out
}
