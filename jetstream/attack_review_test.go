package jetstream

import "testing"

// TestAttackDefaultStorageCapped: `provision` caps EMBED_RESULTS (4 GiB)
// and EMBED_DLQ (1 GiB) in bytes so that no producer fills the servers'
// storage through them, but at its defaults EMBED_JOBS (kept 7 days) and
// the EMBED_BLOBS bucket (1 day) have no byte cap. With the shipped
// account (jetstream: enabled, no limits), producer-a alone can grow them
// until the JetStream store is full: publishing jobs faster than the fleet
// drains them (a publish is cheap, an embedding is not), or asking for
// ColBERT results of up to --max-result-bytes (32 MiB) each, sealed in
// the bucket for a day. Then every stream of the account refuses writes:
// producer-b's jobs, every result, dead letter and the engines KV bucket.
// A tenant must not be able to take the shared store.
func TestAttackDefaultStorageCapped(t *testing.T) {
	c := DefaultConfig()
	if c.Jobs.MaxBytes <= 0 {
		t.Errorf("EMBED_JOBS max bytes %d at defaults: a producer fills the store with a backlog", c.Jobs.MaxBytes)
	}
	if c.Blobs.MaxBytes <= 0 {
		t.Errorf("EMBED_BLOBS max bytes %d at defaults: a producer fills the store with ColBERT blobs", c.Blobs.MaxBytes)
	}
}
