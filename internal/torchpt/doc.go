// Package torchpt reads the state dicts that torch.save writes (such as
// BGE-M3's sparse_linear.pt and colbert_linear.pt) without Python: the zip
// format of torch >= 1.6 (<name>/data.pkl, <name>/data/<key>,
// <name>/byteorder) and the legacy format before it (a magic number and
// three pickles, then the raw storages).
//
// A pickle is a program, and a .pt file is untrusted input: the pickle
// machine here knows only the opcodes a state dict uses and the globals
// that build one (collections.OrderedDict, torch._utils._rebuild_tensor_v2,
// _rebuild_tensor and _rebuild_parameter, and the float storage types
// torch.FloatStorage, HalfStorage, BFloat16Storage and DoubleStorage). Any
// other global is refused with [ErrUnsafe] before anything is called, and
// every size in the file is checked against the file and [Limits] before
// memory is allocated for it.
//
// It imports nothing of the project.
package torchpt
