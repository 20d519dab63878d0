package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/jetembed/jetembed/jetstream"
)

func init() {
	register(command{
		name:    "dlq",
		summary: "list, show and replay dead letters: jetembed dlq list | show SEQ | replay SEQ...",
		args:    "list|show|replay [flags] [SEQ...]",
		run:     runDLQ,
	})
}

func runDLQ(ctx context.Context, args []string, io stdio) error {
	// One flag set for the three subcommands, so that -h lists every flag;
	// a flag of another subcommand is refused below.
	fs := newFlagSet("dlq", io)
	nf := addNATSFlags(fs)
	d := jetstream.DefaultConfig()
	stream := fs.String("dlq-stream", d.DLQ.Name, "name of the dead-letter stream")
	timeout := fs.Duration("timeout", 30*time.Second, "bound on the whole command")
	code := fs.String("code", "", "list: the letters of this code only (e.g. bad_payload, publish_failed); replay: every replayable letter of this code, besides the SEQs given")
	limit := fs.Int("limit", 100, "list: most letters listed, the oldest first (0: all)")
	asJSON := fs.Bool("json", false, "list: one JSON object per letter instead of a table")
	raw := fs.Bool("raw", false, "show: write the stored body only, as it is (for a pipe or a file)")
	jobs := fs.String("jobs-stream", d.Jobs.Name, "name of the jobs work-queue stream")
	// No environment variable: deleting is asked for on the command line.
	purge := fs.FlagSet.Bool("delete", false, "replay: delete each letter from the dead-letter stream once its job is queued again")
	fs.Usage = func() {
		dlqUsage(io)
		fmt.Fprintln(io.err, "\nFlags:")
		fs.PrintDefaults()
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if err := fs.Parse(args); err != nil {
			return err
		}
		return fmt.Errorf("%w: want a subcommand: list, show or replay", errUsage)
	}
	sub, args := args[0], args[1:]
	only := map[string][]string{"list": {"code", "limit", "json"}, "show": {"raw"}, "replay": {"code", "jobs-stream", "delete"}}
	if _, ok := only[sub]; !ok {
		return fmt.Errorf("%w: unknown subcommand %q: want list, show or replay", errUsage, sub)
	}
	rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	var misplaced error
	fs.Visit(func(f *flag.Flag) {
		for other, names := range only {
			if other != sub && slices.Contains(names, f.Name) && !slices.Contains(only[sub], f.Name) {
				misplaced = fmt.Errorf("%w: --%s is a flag of dlq %s, not of dlq %s", errUsage, f.Name, other, sub)
			}
		}
	})
	if misplaced != nil {
		return misplaced
	}
	var seqs []uint64
	for _, a := range rest {
		n, err := strconv.ParseUint(a, 10, 64)
		if err != nil || n == 0 {
			return fmt.Errorf("%w: %q is not a stream sequence", errUsage, a)
		}
		seqs = append(seqs, n)
	}
	switch {
	case sub == "list" && len(seqs) > 0:
		return fmt.Errorf("%w: list takes no arguments", errUsage)
	case sub == "show" && len(seqs) != 1:
		return fmt.Errorf("%w: show takes one stream sequence", errUsage)
	case sub == "replay" && len(seqs) == 0 && *code == "":
		return fmt.Errorf("%w: replay takes stream sequences, or --code", errUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	nc, err := jetstream.Connect(ctx, nf.options(slog.New(slog.NewTextHandler(io.err, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		return err
	}
	defer nc.Close()
	dl, err := jetstream.OpenDeadLetters(nc, *stream)
	if err != nil {
		return err
	}
	switch sub {
	case "list":
		return dlqList(ctx, io, dl, *code, *limit, *asJSON)
	case "show":
		l, err := dl.Get(ctx, seqs[0])
		if err != nil {
			return err
		}
		if *raw {
			_, err = io.out.Write(l.Data)
			return err
		}
		return dlqShow(io, l)
	}
	return dlqReplay(ctx, io, dl, *jobs, *code, seqs, *purge)
}

func dlqUsage(io stdio) {
	fmt.Fprint(io.err, `Usage:
  jetembed dlq list [--code CODE] [--limit N] [--json]   the dead letters, oldest first
  jetembed dlq show [--raw] SEQ                           one letter: its headers and the job it keeps
  jetembed dlq replay [--delete] [--code CODE] SEQ...     queue the jobs again, as they arrived

A letter of a job that can never succeed (bad input, bad_reply,
result_too_large) keeps only the first 4 KiB of it: it is listed and
shown, never replayed.
`)
}

// letterLine is a letter as `dlq list --json` prints it.
type letterLine struct {
	Seq        uint64    `json:"seq"`
	Time       time.Time `json:"time"`
	Code       string    `json:"code"`
	Job        string    `json:"job,omitempty"`
	Subject    string    `json:"subject,omitempty"`
	Delivered  uint64    `json:"delivered,omitempty"`
	Size       int       `json:"size"`
	Kept       int       `json:"kept"`
	Excerpt    bool      `json:"excerpt,omitempty"`
	Replayable bool      `json:"replayable"`
	Message    string    `json:"message,omitempty"`
}

func lineOf(l jetstream.Letter) letterLine {
	size := l.Size
	if l.SHA256 == "" {
		size = len(l.Data)
	}
	return letterLine{Seq: l.Seq, Time: l.Time.UTC(), Code: l.Code, Job: l.JobID, Subject: l.JobSubject, Delivered: l.Delivered,
		Size: size, Kept: len(l.Data), Excerpt: l.Excerpt, Replayable: l.Replayable() == nil, Message: l.Message}
}

func dlqList(ctx context.Context, io stdio, dl *jetstream.DeadLetters, code string, limit int, asJSON bool) error {
	tw := tabwriter.NewWriter(io.out, 0, 4, 2, ' ', 0)
	if !asJSON {
		fmt.Fprintln(tw, "SEQ\tTIME\tCODE\tJOB\tDELIVERED\tBYTES\tBODY\tSUBJECT\tMESSAGE")
	}
	n := 0
	for l, err := range dl.Letters(ctx, code) {
		if err != nil {
			return err
		}
		ll := lineOf(l)
		if asJSON {
			b, err := json.Marshal(ll)
			if err != nil {
				return err
			}
			fmt.Fprintf(io.out, "%s\n", b)
		} else {
			body := "whole"
			switch {
			case l.Advisory:
				body = "advisory"
			case l.Excerpt:
				body = fmt.Sprintf("excerpt %d", ll.Kept)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", ll.Seq, ll.Time.Format(time.RFC3339), ll.Code,
				printable(ll.Job, 40), ll.Delivered, ll.Size, body, printable(ll.Subject, 60), printable(ll.Message, 80))
		}
		if n++; limit > 0 && n >= limit {
			break
		}
	}
	if !asJSON {
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(io.err, "%d letters listed\n", n)
	}
	return nil
}

func dlqShow(io stdio, l jetstream.Letter) error {
	fmt.Fprintf(io.out, "seq: %d\ntime: %s\nstored on: %s\n", l.Seq, l.Time.UTC().Format(time.RFC3339Nano), printable(l.Subject, 0))
	keys := make([]string, 0, len(l.Header))
	for k := range l.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range l.Header[k] {
			fmt.Fprintf(io.out, "%s: %s\n", printable(k, 0), printable(v, 0))
		}
	}
	if err := l.Replayable(); err != nil {
		fmt.Fprintf(io.out, "replayable: no (%v)\n", err)
	} else {
		fmt.Fprintln(io.out, "replayable: yes")
	}
	if utf8.Valid(l.Data) && !strings.ContainsFunc(string(l.Data), func(r rune) bool { return r < ' ' && r != '\n' && r != '\t' && r != '\r' }) {
		fmt.Fprintf(io.out, "body (%d bytes):\n%s\n", len(l.Data), l.Data)
		return nil
	}
	fmt.Fprintf(io.out, "body (%d bytes, binary, base64; --raw writes it as is):\n%s\n", len(l.Data), base64.StdEncoding.EncodeToString(l.Data))
	return nil
}

func dlqReplay(ctx context.Context, io stdio, dl *jetstream.DeadLetters, jobs, code string, seqs []uint64, purge bool) error {
	r, err := dl.Replayer(ctx, jobs)
	if err != nil {
		return err
	}
	var letters []jetstream.Letter
	for _, seq := range seqs {
		l, err := dl.Get(ctx, seq)
		if err != nil {
			return err
		}
		letters = append(letters, l)
	}
	if code != "" {
		for l, err := range dl.Letters(ctx, code) {
			if err != nil {
				return err
			}
			letters = append(letters, l)
		}
	}
	var refused []error
	replayed := 0
	for _, l := range letters {
		ack, err := r.Replay(ctx, l)
		if errors.Is(err, jetstream.ErrNotReplayable) {
			refused = append(refused, err)
			fmt.Fprintf(io.err, "not replayed: %v\n", err)
			continue
		}
		if err != nil {
			return err
		}
		replayed++
		note := ""
		if ack.Duplicate {
			note = " (already replayed: the jobs stream kept the first)"
		}
		fmt.Fprintf(io.out, "replayed %d (%s, job %s) to %s: %s seq %d%s\n", l.Seq, l.Code, printable(l.JobID, 40), l.JobSubject, ack.Stream, ack.Sequence, note)
		if purge {
			if err := dl.Delete(ctx, l.Seq); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(io.err, "%d replayed, %d refused\n", replayed, len(refused))
	if len(refused) > 0 && len(seqs) > 0 {
		// Asked for by sequence: a refusal is the command's failure.
		return fmt.Errorf("%d of the letters asked for are not replayable", len(refused))
	}
	return nil
}

// printable quotes control characters of a value read off the wire and
// cuts it to n bytes (0: no cut), so a hostile header cannot drive the
// terminal.
func printable(s string, n int) string {
	if n > 0 && len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "..."
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f || r == utf8.RuneError }) {
		q := strconv.Quote(s)
		return q[1 : len(q)-1]
	}
	return s
}
