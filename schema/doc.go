// Package schema is wire contract v1 of jetembed: the Job and Result types,
// their msgpack and JSON encodings, limits, validation and the stable error
// codes. It imports nothing of the project.
package schema
