package torchpt

import (
	"encoding/binary"
	"fmt"
	"math"
	"unicode/utf8"
)

// Values of the pickle machine. Only what a state dict needs exists:
// Python's int (int64, or *big.Int past it), float64, string, []byte,
// bool, nil, tuple, *list, *dict, global, and the objects torch builds.
type (
	tuple  []any
	list   struct{ items []any }
	global struct{ module, name string }
	mark   struct{}
	// dict keeps insertion order, as OrderedDict (and dict) do.
	dict struct {
		keys []any
		vals map[any]any
	}
	// storageRef is a persistent id: a storage saved beside the pickle.
	storageRef struct {
		dtype dtype
		key   string
		numel int64
	}
	// tensorRef is a tensor of a storage: _rebuild_tensor_v2's arguments.
	tensorRef struct {
		storage *storageRef
		offset  int64
		shape   []int64
		stride  []int64
	}
)

func newDict() *dict { return &dict{vals: map[any]any{}} }

func (d *dict) set(k, v any) error {
	switch k.(type) {
	case string, int64, bool:
	default:
		return fmt.Errorf("dict key of type %s", typeName(k))
	}
	if _, ok := d.vals[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.vals[k] = v
	return nil
}

// machine runs one pickle. persistentLoad resolves BINPERSID.
type machine struct {
	b              []byte
	pos            int
	stack          []any
	marks          []int
	memo           map[uint32]any
	persistentLoad func(pid any) (any, error)
	maxOps         int
}

// unpickle runs the pickle at the start of b and returns its value and the
// bytes it used.
func unpickle(b []byte, persistentLoad func(any) (any, error)) (any, int, error) {
	m := &machine{b: b, memo: map[uint32]any{}, persistentLoad: persistentLoad, maxOps: len(b) + 1}
	v, err := m.run()
	if err != nil {
		return nil, m.pos, fmt.Errorf("pickle at offset %d: %w", m.pos, err)
	}
	return v, m.pos, nil
}

func (m *machine) run() (any, error) {
	for ops := 0; ; ops++ {
		if ops > m.maxOps {
			return nil, fmt.Errorf("more opcodes than bytes")
		}
		op, err := m.byte()
		if err != nil {
			return nil, err
		}
		switch op {
		case 0x80: // PROTO
			p, err := m.byte()
			if err != nil {
				return nil, err
			}
			if p > 5 {
				return nil, fmt.Errorf("pickle protocol %d", p)
			}
		case 0x95: // FRAME: a length hint, nothing to do
			if _, err := m.bytes(8); err != nil {
				return nil, err
			}
		case '.': // STOP
			if len(m.stack) != 1 || len(m.marks) != 0 {
				return nil, fmt.Errorf("stop with %d values and %d marks on the stack", len(m.stack), len(m.marks))
			}
			if _, ok := m.stack[0].(mark); ok {
				return nil, fmt.Errorf("stop on a mark")
			}
			return m.stack[0], nil
		case '(': // MARK
			m.marks = append(m.marks, len(m.stack))
			m.stack = append(m.stack, mark{})
		case '0': // POP
			if _, err := m.pop(); err != nil {
				return nil, err
			}
		case '1': // POP_MARK
			if _, err := m.popMark(); err != nil {
				return nil, err
			}
		case '2': // DUP
			v, err := m.top()
			if err != nil {
				return nil, err
			}
			m.push(v)
		case 'N':
			m.push(nil)
		case 0x88:
			m.push(true)
		case 0x89:
			m.push(false)
		case 'K': // BININT1
			v, err := m.byte()
			if err != nil {
				return nil, err
			}
			m.push(int64(v))
		case 'M': // BININT2
			b, err := m.bytes(2)
			if err != nil {
				return nil, err
			}
			m.push(int64(binary.LittleEndian.Uint16(b)))
		case 'J': // BININT
			b, err := m.bytes(4)
			if err != nil {
				return nil, err
			}
			m.push(int64(int32(binary.LittleEndian.Uint32(b))))
		case 0x8a: // LONG1
			n, err := m.byte()
			if err != nil {
				return nil, err
			}
			b, err := m.bytes(int(n))
			if err != nil {
				return nil, err
			}
			m.push(decodeLong(b))
		case 'G': // BINFLOAT
			b, err := m.bytes(8)
			if err != nil {
				return nil, err
			}
			m.push(math.Float64frombits(binary.BigEndian.Uint64(b)))
		case 'X', 0x8c, 0x8d: // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
			b, err := m.counted(op)
			if err != nil {
				return nil, err
			}
			if !utf8.Valid(b) {
				return nil, fmt.Errorf("string is not UTF-8")
			}
			m.push(string(b))
		case 'C', 'B': // SHORT_BINBYTES, BINBYTES
			b, err := m.counted(op)
			if err != nil {
				return nil, err
			}
			m.push(append([]byte(nil), b...))
		case ')':
			m.push(tuple{})
		case 't':
			items, err := m.popMark()
			if err != nil {
				return nil, err
			}
			m.push(tuple(items))
		case 0x85, 0x86, 0x87: // TUPLE1..3
			n := int(op - 0x84)
			if len(m.stack)-n < m.floor() {
				return nil, fmt.Errorf("tuple of %d with %d values", n, len(m.stack)-m.floor())
			}
			t := append(tuple(nil), m.stack[len(m.stack)-n:]...)
			m.stack = m.stack[:len(m.stack)-n]
			m.push(t)
		case ']':
			m.push(&list{})
		case 'l': // LIST
			items, err := m.popMark()
			if err != nil {
				return nil, err
			}
			m.push(&list{items: items})
		case 'a', 'e': // APPEND, APPENDS
			var items []any
			if op == 'a' {
				v, err := m.pop()
				if err != nil {
					return nil, err
				}
				items = []any{v}
			} else if items, err = m.popMark(); err != nil {
				return nil, err
			}
			v, err := m.top()
			if err != nil {
				return nil, err
			}
			l, ok := v.(*list)
			if !ok {
				return nil, fmt.Errorf("append to %s", typeName(v))
			}
			l.items = append(l.items, items...)
		case '}':
			m.push(newDict())
		case 'd': // DICT
			items, err := m.popMark()
			if err != nil {
				return nil, err
			}
			d := newDict()
			if err := setItems(d, items); err != nil {
				return nil, err
			}
			m.push(d)
		case 's', 'u': // SETITEM, SETITEMS
			var items []any
			if op == 's' {
				if len(m.stack)-2 < m.floor() {
					return nil, fmt.Errorf("setitem without a key and a value")
				}
				items = append([]any(nil), m.stack[len(m.stack)-2:]...)
				m.stack = m.stack[:len(m.stack)-2]
			} else if items, err = m.popMark(); err != nil {
				return nil, err
			}
			v, err := m.top()
			if err != nil {
				return nil, err
			}
			d, ok := v.(*dict)
			if !ok {
				return nil, fmt.Errorf("setitem on %s", typeName(v))
			}
			if err := setItems(d, items); err != nil {
				return nil, err
			}
		case 'q', 'r', 0x94: // BINPUT, LONG_BINPUT, MEMOIZE
			v, err := m.top()
			if err != nil {
				return nil, err
			}
			var idx uint32
			switch op {
			case 'q':
				b, err := m.byte()
				if err != nil {
					return nil, err
				}
				idx = uint32(b)
			case 'r':
				b, err := m.bytes(4)
				if err != nil {
					return nil, err
				}
				idx = binary.LittleEndian.Uint32(b)
			default:
				idx = uint32(len(m.memo))
			}
			m.memo[idx] = v
		case 'h', 'j': // BINGET, LONG_BINGET
			var idx uint32
			if op == 'h' {
				b, err := m.byte()
				if err != nil {
					return nil, err
				}
				idx = uint32(b)
			} else {
				b, err := m.bytes(4)
				if err != nil {
					return nil, err
				}
				idx = binary.LittleEndian.Uint32(b)
			}
			v, ok := m.memo[idx]
			if !ok {
				return nil, fmt.Errorf("memo %d is empty", idx)
			}
			m.push(v)
		case 'c': // GLOBAL: "module\nname\n"
			mod, err := m.line()
			if err != nil {
				return nil, err
			}
			name, err := m.line()
			if err != nil {
				return nil, err
			}
			g, err := lookup(mod, name)
			if err != nil {
				return nil, err
			}
			m.push(g)
		case 0x93: // STACK_GLOBAL
			if len(m.stack)-2 < m.floor() {
				return nil, fmt.Errorf("stack_global without a module and a name")
			}
			mod, ok1 := m.stack[len(m.stack)-2].(string)
			name, ok2 := m.stack[len(m.stack)-1].(string)
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("stack_global of non-strings")
			}
			m.stack = m.stack[:len(m.stack)-2]
			g, err := lookup(mod, name)
			if err != nil {
				return nil, err
			}
			m.push(g)
		case 'R': // REDUCE
			args, err := m.pop()
			if err != nil {
				return nil, err
			}
			fn, err := m.pop()
			if err != nil {
				return nil, err
			}
			t, ok := args.(tuple)
			if !ok {
				return nil, fmt.Errorf("reduce with %s arguments", typeName(args))
			}
			g, ok := fn.(global)
			if !ok {
				return nil, fmt.Errorf("reduce of %s", typeName(fn))
			}
			v, err := call(g, t)
			if err != nil {
				return nil, err
			}
			m.push(v)
		case 'b': // BUILD: OrderedDict's state (its _metadata attribute) is dropped
			state, err := m.pop()
			if err != nil {
				return nil, err
			}
			v, err := m.top()
			if err != nil {
				return nil, err
			}
			if _, ok := v.(*dict); !ok {
				return nil, fmt.Errorf("build of %s", typeName(v))
			}
			switch state.(type) {
			case *dict, nil:
			default:
				return nil, fmt.Errorf("build with %s state", typeName(state))
			}
		case 'Q': // BINPERSID
			pid, err := m.pop()
			if err != nil {
				return nil, err
			}
			if m.persistentLoad == nil {
				return nil, fmt.Errorf("persistent id outside a torch file")
			}
			v, err := m.persistentLoad(pid)
			if err != nil {
				return nil, err
			}
			m.push(v)
		default:
			return nil, fmt.Errorf("unsupported pickle opcode 0x%02x", op)
		}
	}
}
