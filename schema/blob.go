package schema

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
)

// BlobKeySize is the size of a [Blob.Key]: AES-256.
const BlobKeySize = 32

// ErrBlobSeal is what [OpenBlob] wraps when an object does not open with
// its key: another object, a changed one, or a wrong key.
var ErrBlobSeal = errors.New("blob does not open with its key")

// NewBlobKey returns a fresh random key for one blob.
func NewBlobKey() ([]byte, error) {
	k := make([]byte, BlobKeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("blob key: %w", err)
	}
	return k, nil
}

// SealBlob seals a result stored as the blob name with key (AES-256-GCM,
// the name as additional data, so that an object moved under another name
// does not open): the stored object is the ciphertext followed by the
// 16-byte tag. Every key seals one object only, so the nonce is fixed
// (twelve zero bytes). plain's storage is reused when its capacity allows.
//
// The blobs bucket is readable by whoever reads blobs at all: sealed, a
// result is readable only by the holder of the reference that carries its
// key, that is by whoever may read the job's reply.
func SealBlob(key []byte, name string, plain []byte) ([]byte, error) {
	aead, err := blobAEAD(key)
	if err != nil {
		return nil, err
	}
	var nonce [12]byte
	return aead.Seal(plain[:0], nonce[:], plain, []byte(name)), nil
}

// OpenBlob opens an object sealed by [SealBlob] as name with key, reusing
// sealed's storage. A failure wraps [ErrBlobSeal].
func OpenBlob(key []byte, name string, sealed []byte) ([]byte, error) {
	aead, err := blobAEAD(key)
	if err != nil {
		return nil, err
	}
	var nonce [12]byte
	plain, err := aead.Open(sealed[:0], nonce[:], sealed, []byte(name))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBlobSeal, err)
	}
	return plain, nil
}

func blobAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != BlobKeySize {
		return nil, fmt.Errorf("%w: key of %d bytes, want %d", ErrBlobSeal, len(key), BlobKeySize)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBlobSeal, err)
	}
	return cipher.NewGCM(block)
}
