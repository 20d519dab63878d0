//go:build !unix

package gateway

// fileLimit is unknown off unix: the cap is MaxConns alone.
func fileLimit() int { return 0 }
