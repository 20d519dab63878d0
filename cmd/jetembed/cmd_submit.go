package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

func init() {
	register(command{
		name:    "submit",
		summary: "queue JSONL texts as jobs and write their results in input order (resumable), or --text for one vector now",
		args:    "[flags] FILE|- (or --text TEXT)",
		run:     runSubmit,
	})
}

type submitFlags struct {
	json        *bool
	outputs     *string
	noTruncate  *bool
	jobSize     *int
	maxInFlight *int
	run         *string
	out         *string
	text        *string
	timeout     *time.Duration
	results     *string
	jobsStream  *string
	consumer    *string
	tenant      *string
}

func runSubmit(ctx context.Context, args []string, io stdio) error {
	fs := newFlagSet("submit", io)
	nf := addNATSFlags(fs)
	f := addSubmitFlags(fs)
	files, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	outs, err := schema.ParseOutputs(*f.outputs)
	if err != nil {
		return fmt.Errorf("%w: --outputs: %w", errUsage, err)
	}
	log := slog.New(slog.NewTextHandler(io.err, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if *f.text == "" && fs.isSet("text") {
		return fmt.Errorf("%w: --text is empty: give the text to embed (--text hello), or an input file", errUsage)
	}
	if *f.text != "" {
		if len(files) > 0 {
			return fmt.Errorf("%w: --text takes no input file", errUsage)
		}
		return submitText(ctx, forTenant(nf.options(log), *f.tenant), f, outs, io)
	}
	if len(files) != 1 {
		return fmt.Errorf("%w: want one input file (JSONL, - for stdin) or --text", errUsage)
	}
	if *f.jobSize < 1 || *f.maxInFlight < 1 {
		return fmt.Errorf("%w: --job-size and --max-inflight must be positive", errUsage)
	}
	return submitFile(ctx, forTenant(nf.options(log), *f.tenant), log, f, outs, files[0], io)
}

func addSubmitFlags(fs *flagSet) submitFlags {
	f := submitFlags{
		json:        fs.Bool("json", false, "send jobs as JSON instead of msgpack"),
		outputs:     fs.String("outputs", "dense", "vectors to compute: dense, sparse, colbert (comma separated)"),
		noTruncate:  fs.Bool("no-truncate", false, "fail texts over the model's maximum with text_too_long instead of cutting them"),
		jobSize:     fs.Int("job-size", 32, "texts per job"),
		maxInFlight: fs.Int("max-inflight", 64, "jobs submitted and not yet answered"),
		run:         fs.String("run", "", "run id: jobs go to embed.jobs.[<tenant>.]<run>.<job>, results to embed.results.[<tenant>.]<run>.<job> (default: derived from the input and the job settings, so a rerun resumes)"),
		out:         fs.String("out", "-", "output JSONL file (- for stdout)"),
		text:        fs.String("text", "", "embed this one text now through the request-reply endpoint and print the JSON result"),
		timeout:     fs.Duration("timeout", 30*time.Second, "with --text: how long to wait for the answer"),
		results:     fs.String("results-stream", jetstream.DefaultConfig().Results.Name, "name of the results stream, where a run's results are read back"),
		jobsStream:  fs.String("jobs-stream", jetstream.DefaultConfig().Jobs.Name, "name of the jobs work-queue stream"),
		consumer:    fs.String("consumer", jetstream.DefaultConfig().Consumer.Name, "name of the durable pull consumer"),
		tenant:      addTenantFlag(fs),
	}
	fs.FlagSet.StringVar(f.out, "o", *f.out, "shorthand for --out")
	return f
}

// parseInterleaved parses flags that may follow the input files (submit
// in.jsonl -o out.jsonl): the flag package stops at the first argument,
// so it parses again after each one. It returns the files.
func parseInterleaved(fs *flagSet, args []string) ([]string, error) {
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return files, nil
		}
		files, args = append(files, fs.Arg(0)), fs.Args()[1:]
	}
}

// submitFile queues the jobs of one JSONL input (- for stdin) and writes
// their results, resuming a run that was cut off.
func submitFile(ctx context.Context, o jetstream.Options, log *slog.Logger, f submitFlags, outs []schema.Output, file string, io stdio) error {
	nc, err := jetstream.Connect(ctx, o)
	if err != nil {
		return err
	}
	defer nc.Close()
	cut, err := newJobCut(*f.jobSize, nc.MaxPayload(), *f.json)
	if err != nil {
		return err
	}
	// A file is read twice, streaming: once for the run id and the size of
	// the run, once to submit it. stdin is read once.
	sum := inputSummary{jobs: -1, texts: -1}
	if file != "-" {
		if sum, err = summarize(file, f, cut); err != nil {
			return err
		}
	}
	if *f.run == "" {
		if file == "-" {
			return fmt.Errorf("%w: input from stdin needs --run (a resumed run must find its results)", errUsage)
		}
		*f.run = sum.run
	}
	r, closeIn, err := openInput(file, io.in)
	if err != nil {
		return err
	}
	defer closeIn()
	w := io.out
	if *f.out != "-" {
		out, err := os.Create(*f.out)
		if err != nil {
			return err
		}
		defer out.Close()
		w = out
	}
	streams := jetstream.DefaultConfig()
	streams.Results.Name = *f.results
	opts := []client.Option{client.WithRun(*f.run), client.WithNames(streams.ClientNames()), client.WithTenant(*f.tenant)}
	if *f.json {
		opts = append(opts, client.WithJSON())
	}
	c, err := client.New(nc, opts...)
	if err != nil {
		return err
	}
	b, err := newBulk(c, *f.run, f, cut, outs, log)
	if err != nil {
		return err
	}
	defer b.close()
	// A tenant may not read the fleet's consumer: its watch says only how
	// the connection is.
	jobs := *f.jobsStream
	if *f.tenant != "" {
		jobs = ""
	}
	err = b.run(ctx, newInputReader(r), sum, w, io.err, jetstream.RunWatch(nc, jobs, *f.consumer))
	if ferr := nc.Drain(); err == nil && ferr != nil {
		err = ferr
	}
	return err
}

func submitText(ctx context.Context, o jetstream.Options, f submitFlags, outs []schema.Output, io stdio) error {
	nc, err := jetstream.Connect(ctx, o)
	if err != nil {
		return err
	}
	defer nc.Close()
	opts := []client.Option{client.WithOutputs(outs...), client.WithTenant(*f.tenant)}
	if *f.json {
		opts = append(opts, client.WithJSON())
	}
	c, err := client.New(nc, opts...)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *f.timeout)
	defer cancel()
	job := schema.NewJob(fmt.Sprintf("text-%d", time.Now().UnixNano()), *f.text)
	job.Outputs = outs
	if *f.noTruncate {
		no := false
		job.Truncate = &no
	}
	res, rerr := c.Request(ctx, job)
	if res == nil {
		return rerr
	}
	var it schema.Item
	switch {
	case res.Error != nil:
		it.Error = res.Error
	case len(res.Items) == 1:
		it = res.Items[0]
	default:
		it.Error = schema.Errorf(schema.CodeInternal, "result has %d items for 1 text", len(res.Items))
	}
	data, err := json.Marshal(newOutputLine("1", res.Model, it))
	if err != nil {
		return err
	}
	fmt.Fprintf(io.out, "%s\n", data)
	if rerr != nil {
		return rerr
	}
	if it.Error != nil {
		return linesFailed(1, 1)
	}
	return nil
}

// inputLine is one line of the input file: a text with its id, or why it
// has none.
type inputLine struct {
	n    int // line number, from 1
	id   string
	text string
	err  *schema.Error
}

// inputReader reads the input one line at a time, so a run of millions of
// texts never holds more of it than the jobs in flight.
type inputReader struct {
	sc *bufio.Scanner
	n  int // lines read
}

func newInputReader(r io.Reader) *inputReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	return &inputReader{sc: sc}
}

// next returns the next line; ok is false at the end or on an error (see
// Err).
func (r *inputReader) next() (l inputLine, ok bool) {
	if !r.sc.Scan() {
		return inputLine{}, false
	}
	r.n++
	lt := parseLine(r.sc.Bytes(), r.n)
	return inputLine{n: r.n, id: lt.id, text: lt.text, err: lt.err}, true
}

func (r *inputReader) Err() error { return r.sc.Err() }

// openInput opens the input file, or stdin for "-".
func openInput(path string, stdin io.Reader) (io.Reader, func(), error) {
	if path == "-" {
		return stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	return f, func() { f.Close() }, nil
}

// inputSummary is what a first pass over an input file learns: the run id
// it derives and the size of the run, for the progress bar.
type inputSummary struct {
	run         string
	jobs, texts int
}

// summarize reads the input file once, streaming, cutting it as the run
// will. The run id names a run after its input and the settings that shape
// its jobs: the same command on the same file resumes, a changed one does
// not mix with it.
func summarize(path string, f submitFlags, cut jobCut) (inputSummary, error) {
	r, closeIn, err := openInput(path, nil)
	if err != nil {
		return inputSummary{}, err
	}
	defer closeIn()
	h := sha256.New()
	fmt.Fprintf(h, "v2 %s outputs=%s truncate=%v\n", cut.key(), *f.outputs, !*f.noTruncate)
	in := newInputReader(r)
	var sum inputSummary
	for {
		j, texts, err := cut.next(in)
		if err != nil {
			return inputSummary{}, fmt.Errorf("read %s: %w", path, err)
		}
		if len(j.lines) == 0 {
			break
		}
		sum.jobs++
		sum.texts += len(texts)
		fmt.Fprintf(h, "job %d\n", len(j.lines))
		k := 0
		for _, l := range j.lines {
			text := ""
			if l.err == nil {
				text = texts[k]
				k++
			}
			fmt.Fprintf(h, "%q %q %v\n", l.id, text, l.err != nil)
		}
	}
	sum.run = "r" + hex.EncodeToString(h.Sum(nil))[:16]
	return sum, nil
}
