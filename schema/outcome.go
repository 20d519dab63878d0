package schema

// Outcome is how the job loop settled a job, or a text, on one delivery:
// the label of the jobs and texts counters of its metrics.
type Outcome string

// The outcomes of jetembed_jobs_total and jetembed_texts_total.
const (
	// OutcomeOK: the result was published and the message ACKed.
	OutcomeOK Outcome = "ok"
	// OutcomeError: an error result was published (a failed item, or a job
	// the consumer refused for good) and the message ACKed.
	OutcomeError Outcome = "error"
	// OutcomeNak: the message was NAKed and will be delivered again.
	OutcomeNak Outcome = "nak"
	// OutcomeTerm: the message was terminated (bad input, or retries
	// exhausted) and copied to the DLQ.
	OutcomeTerm Outcome = "term"
)
