package schema

import "unicode/utf8"

// TokenizeRequest is the body of a request to the tokenize endpoint
// (embed.v1.tokenize): the model's own tokenization of texts, as the
// engine runs it. Encoded like a job, with the same strict rules.
type TokenizeRequest struct {
	V     int      `msgpack:"v" json:"v"`
	ID    string   `msgpack:"id" json:"id"`
	Texts []string `msgpack:"texts" json:"texts"`
	// AddSpecial adds the model's special tokens (<s> ... </s>); nil
	// means true.
	AddSpecial *bool `msgpack:"add_special,omitempty" json:"add_special,omitempty"`
}

// TokenizeResult is the answer of the tokenize endpoint: one item per
// text, in order.
type TokenizeResult struct {
	V     int            `msgpack:"v" json:"v"`
	ID    string         `msgpack:"id" json:"id"`
	Model string         `msgpack:"model,omitempty" json:"model,omitempty"`
	Items []TokenizeItem `msgpack:"items" json:"items"`
	Error *Error         `msgpack:"error,omitempty" json:"error,omitempty"`
}

// TokenizeItem is one text's tokens: ids, their vocabulary strings, and
// which are special tokens; Count is the tokens before the model's cut
// (over len(IDs) when the text is longer than the model takes).
type TokenizeItem struct {
	IDs     []uint32 `msgpack:"ids" json:"ids"`
	Tokens  []string `msgpack:"tokens" json:"tokens"`
	Special []bool   `msgpack:"special" json:"special"`
	Count   int      `msgpack:"count" json:"count"`
	Error   *Error   `msgpack:"error,omitempty" json:"error,omitempty"`
}

// Err returns the request-level error, or nil.
func (r *TokenizeResult) Err() error {
	if r.Error == nil {
		return nil
	}
	return r.Error
}

// EncodeTokenizeRequest encodes a tokenize request.
func EncodeTokenizeRequest(r *TokenizeRequest, enc Encoding) ([]byte, error) {
	return encodePlain(r, enc)
}

// EncodeTokenizeResult encodes a tokenize answer.
func EncodeTokenizeResult(r *TokenizeResult, enc Encoding) ([]byte, error) {
	return encodePlain(r, enc)
}

// DecodeTokenizeResult decodes a tokenize answer.
func DecodeTokenizeResult(data []byte, enc Encoding) (*TokenizeResult, error) {
	r := new(TokenizeResult)
	if err := decodePlain(data, enc, r); err != nil {
		return nil, Errorf(CodeBadPayload, "decode %s tokenize result: %v", enc, err)
	}
	return r, nil
}

// DecodeTokenizeRequest decodes and checks a tokenize request, with the
// rules and errors of [Limits.DecodeRerankRequest]; a text that is not
// UTF-8 fails its item (invalid_utf8), not the request.
func (l Limits) DecodeTokenizeRequest(data []byte, enc Encoding) (*TokenizeRequest, *Error) {
	l = l.WithDefaults()
	if e := l.CheckPayload(len(data)); e != nil {
		return nil, e
	}
	r := &TokenizeRequest{V: Version}
	err := decodeRequest(data, enc, func(key string, dec func(v any) error) error {
		switch key {
		case "v":
			return dec(&r.V)
		case "id":
			return dec(&r.ID)
		case "texts":
			return dec(&r.Texts)
		case "add_special":
			r.AddSpecial = new(bool)
			return dec(r.AddSpecial)
		}
		return nil
	})
	if err != nil {
		return r, Errorf(CodeBadPayload, "decode %s tokenize request: %v", enc, err)
	}
	switch {
	case r.V != Version:
		return r, Errorf(CodeBadVersion, "version %d (want %d)", r.V, Version)
	case r.ID == "":
		return r, Errorf(CodeMissingID, "id is required")
	case len(r.ID) > l.MaxIDBytes || !utf8.ValidString(r.ID):
		return r, Errorf(CodeBadPayload, "id is over %d bytes or not UTF-8", l.MaxIDBytes)
	case len(r.Texts) == 0:
		return r, Errorf(CodeEmptyJob, "texts is required")
	case len(r.Texts) > l.MaxTexts:
		return r, Errorf(CodeTooManyTexts, "%d texts, over the limit of %d", len(r.Texts), l.MaxTexts)
	}
	for i, t := range r.Texts {
		if len(t) > l.MaxTextBytes {
			return r, Errorf(CodeJobTooLarge, "text %d is %d bytes, over the limit of %d", i, len(t), l.MaxTextBytes)
		}
	}
	return r, nil
}
