package torchpt

import (
	"encoding/binary"
	"fmt"
	"math/big"
)

// decodeLong is LONG1's little-endian two's complement integer.
func decodeLong(b []byte) any {
	if len(b) == 0 {
		return int64(0)
	}
	if len(b) <= 8 {
		var u uint64
		for i := len(b) - 1; i >= 0; i-- {
			u = u<<8 | uint64(b[i])
		}
		shift := 64 - 8*len(b)
		return int64(u<<shift) >> shift
	}
	be := make([]byte, len(b))
	for i := range b {
		be[len(b)-1-i] = b[i]
	}
	n := new(big.Int).SetBytes(be)
	if b[len(b)-1]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	return n
}

func (m *machine) push(v any) { m.stack = append(m.stack, v) }

// floor is the stack index above the innermost mark.
func (m *machine) floor() int {
	if len(m.marks) == 0 {
		return 0
	}
	return m.marks[len(m.marks)-1] + 1
}

func (m *machine) pop() (any, error) {
	if len(m.stack) <= m.floor() {
		return nil, fmt.Errorf("pop from an empty stack")
	}
	v := m.stack[len(m.stack)-1]
	m.stack = m.stack[:len(m.stack)-1]
	return v, nil
}

func (m *machine) top() (any, error) {
	if len(m.stack) <= m.floor() {
		return nil, fmt.Errorf("empty stack")
	}
	return m.stack[len(m.stack)-1], nil
}

// popMark pops the values above the innermost mark, and the mark.
func (m *machine) popMark() ([]any, error) {
	if len(m.marks) == 0 {
		return nil, fmt.Errorf("no mark")
	}
	at := m.marks[len(m.marks)-1]
	m.marks = m.marks[:len(m.marks)-1]
	items := append([]any(nil), m.stack[at+1:]...)
	m.stack = m.stack[:at]
	return items, nil
}

func (m *machine) byte() (byte, error) {
	if m.pos >= len(m.b) {
		return 0, fmt.Errorf("truncated pickle")
	}
	m.pos++
	return m.b[m.pos-1], nil
}

func (m *machine) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(m.b)-m.pos {
		return nil, fmt.Errorf("truncated pickle (%d bytes wanted, %d left)", n, len(m.b)-m.pos)
	}
	m.pos += n
	return m.b[m.pos-n : m.pos], nil
}

// counted reads a length-prefixed string or bytes value.
func (m *machine) counted(op byte) ([]byte, error) {
	var n uint64
	switch op {
	case 0x8c, 'C':
		b, err := m.byte()
		if err != nil {
			return nil, err
		}
		n = uint64(b)
	case 'X', 'B':
		b, err := m.bytes(4)
		if err != nil {
			return nil, err
		}
		n = uint64(binary.LittleEndian.Uint32(b))
	default:
		b, err := m.bytes(8)
		if err != nil {
			return nil, err
		}
		n = binary.LittleEndian.Uint64(b)
	}
	if n > uint64(len(m.b)-m.pos) {
		return nil, fmt.Errorf("truncated pickle (%d bytes wanted, %d left)", n, len(m.b)-m.pos)
	}
	return m.bytes(int(n))
}

// line reads a GLOBAL operand up to its newline.
func (m *machine) line() (string, error) {
	for i := m.pos; i < len(m.b) && i-m.pos < 256; i++ {
		if m.b[i] == '\n' {
			s := string(m.b[m.pos:i])
			m.pos = i + 1
			return s, nil
		}
	}
	return "", fmt.Errorf("global name without a newline")
}

func typeName(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case mark:
		return "a mark"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []byte:
		return "bytes"
	case bool:
		return "bool"
	case tuple:
		return "tuple"
	case *list:
		return "list"
	case *dict:
		return "dict"
	case global:
		return v.module + "." + v.name
	case *storageRef:
		return "storage"
	case *tensorRef:
		return "tensor"
	}
	return fmt.Sprintf("%T", v)
}
