#!/usr/bin/env python3
"""Writes the hand-made hostile GGUF inputs in tests/fuzz/regressions/gguf/.

Naming convention read by tests/format/gguf_regression_test.cc:
  bad-*   must be rejected with pagellm::Error
  good-*  must parse
  fuzz-*  (inputs saved from fuzzer crashes) may do either, but nothing else.

Usage: tests/fuzz/make_regression_inputs.py [output-dir]
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
F32_T, F16_T, Q4_0_T, Q8_0_T, F64_T = 0, 1, 2, 8, 28
U64_MAX = (1 << 64) - 1


def u32(x):
    return struct.pack('<I', x & 0xFFFFFFFF)


def u64(x):
    return struct.pack('<Q', x & U64_MAX)


def gstr(s, length=None):
    b = s.encode() if isinstance(s, str) else s
    return u64(len(b) if length is None else length) + b


def header(n_tensors, n_kv, version=3):
    return b'GGUF' + u32(version) + u64(n_tensors) + u64(n_kv)


def kv(key, vtype, payload):
    return gstr(key) + u32(vtype) + payload


def arr(elem_type, n, payload=b''):
    return u32(elem_type) + u64(n) + payload


def tinfo(name, ne, ggml_type, offset, n_dims=None):
    return (gstr(name) + u32(len(ne) if n_dims is None else n_dims) + b''.join(u64(d) for d in ne) +
            u32(ggml_type) + u64(offset))


def pad(b, alignment=32):
    return b + b'\0' * (-len(b) % alignment)


def with_data(head, data, alignment=32):
    return pad(head, alignment) + data


def f32_tensor_file(ne, offset=0, data_bytes=None, ggml_type=F32_T, n_dims=None):
    head = header(1, 0) + tinfo('t', ne, ggml_type, offset, n_dims)
    return with_data(head, b'\x11' * (16 if data_bytes is None else data_bytes))


def nested(depth, leaf=b''):
    """An array nested `depth` levels deep (depth 1 = a plain array of one u8)."""
    if depth == 1:
        return arr(U8, 1, b'\x07')
    return arr(ARR, 1, nested(depth - 1))


def cases():
    c = {}
    # --- framing ---
    c['bad-empty'] = b''
    c['bad-three-bytes'] = b'GGU'
    c['bad-magic'] = b'GGUG' + u32(3) + u64(0) + u64(0)
    c['bad-version-1'] = header(0, 0, version=1)
    c['bad-version-4'] = header(0, 0, version=4)
    c['bad-version-max'] = header(0, 0, version=0xFFFFFFFF)
    c['bad-truncated-counts'] = b'GGUF' + u32(3) + u64(0) + b'\0\0\0'
    c['good-minimal'] = header(0, 0)
    c['good-minimal-v2'] = header(0, 0, version=2)
    c['bad-kv-count-huge'] = header(0, U64_MAX)
    c['bad-kv-count-2e63'] = header(0, 1 << 63) + b'\0' * 64
    c['bad-tensor-count-huge'] = header(U64_MAX, 0)
    c['bad-tensor-count-fits-barely'] = header(2, 0) + b'\0' * 48
    # --- strings ---
    c['bad-key-length-2e63'] = header(0, 1) + gstr('k', length=1 << 63)
    c['bad-key-length-max'] = header(0, 1) + gstr('k', length=U64_MAX)
    c['bad-string-length-2e63'] = header(0, 1) + kv('s', STR, gstr('abc', length=1 << 63))
    c['bad-string-length-max'] = header(0, 1) + kv('s', STR, gstr('abc', length=U64_MAX))
    c['bad-string-length-2e30-plus-1'] = header(0, 1) + kv('s', STR, gstr('abc', length=(1 << 30) + 1))
    c['bad-string-length-one-past-end'] = header(0, 1) + kv('s', STR, gstr('abc', length=4))
    c['good-string-empty-key'] = header(0, 1) + kv('', STR, gstr(''))
    c['good-string-binary'] = header(0, 1) + kv('bin', STR, gstr(bytes(range(256))))
    # --- value types ---
    c['bad-value-type-13'] = header(0, 1) + kv('x', 13, u64(0))
    c['bad-value-type-max'] = header(0, 1) + kv('x', 0xFFFFFFFF, u64(0))
    c['bad-bool-2'] = header(0, 1) + kv('b', BOOL, b'\x02')
    c['bad-truncated-u64'] = header(0, 1) + kv('x', U64, b'\0' * 7)
    c['good-f64-nan'] = header(0, 1) + kv('x', F64, u64(0x7FF8000000000001))
    c['good-f32-snan'] = header(0, 1) + kv('x', F32, u32(0x7F800001))
    c['good-f64-huge-as-f32-key'] = header(0, 1) + kv('llama.attention.layer_norm_rms_epsilon', F64,
                                                      struct.pack('<d', 1e300))
    # --- arrays ---
    c['bad-array-count-max'] = header(0, 1) + kv('a', ARR, arr(U8, U64_MAX))
    c['bad-array-count-2e63'] = header(0, 1) + kv('a', ARR, arr(U64, 1 << 63))
    c['bad-array-count-mul-overflow'] = header(0, 1) + kv('a', ARR, arr(U64, (1 << 61) + 1, b'\0' * 16))
    c['bad-array-of-arrays-count-huge'] = header(0, 1) + kv('a', ARR, arr(ARR, 1 << 40))
    c['bad-array-strings-count-huge'] = header(0, 1) + kv('tokenizer.ggml.tokens', ARR, arr(STR, 1 << 40))
    c['bad-array-elem-type-13'] = header(0, 1) + kv('a', ARR, arr(13, 0))
    c['bad-array-truncated'] = header(0, 1) + kv('a', ARR, arr(U32, 3, u32(1) + u32(2)))
    c['bad-array-string-elem-too-long'] = header(0, 1) + kv('a', ARR, arr(STR, 2, gstr('x') + gstr('y', length=1 << 62)))
    c['bad-array-nested-5-deep'] = header(0, 1) + kv('a', ARR, nested(5))
    c['bad-array-nested-1000-deep'] = header(0, 1) + kv('a', ARR, b''.join(arr(ARR, 1) for _ in range(1000)))
    c['good-array-nested-4-deep'] = header(0, 1) + kv('a', ARR, nested(4))
    c['good-array-empty-of-every-type'] = header(0, 13) + b''.join(kv('e%d' % t, ARR, arr(t, 0)) for t in range(13))
    c['good-array-of-empty-arrays'] = header(0, 1) + kv('a', ARR, arr(ARR, 300, arr(U8, 0) * 300))
    c['good-tokens-not-strings'] = header(0, 1) + kv('tokenizer.ggml.tokens', ARR, arr(U32, 2, u32(1) + u32(2)))
    c['good-tokens-array-of-arrays'] = header(0, 1) + kv('tokenizer.ggml.tokens', ARR,
                                                         arr(ARR, 1, arr(STR, 1, gstr('a'))))
    c['good-scores-bools'] = header(0, 1) + kv('tokenizer.ggml.scores', ARR, arr(BOOL, 2, b'\x01\x00'))
    # Long key repeated into the error context of every string element: must stay fast.
    c['good-long-key-many-strings'] = header(0, 1) + kv('k' * 16384, ARR, arr(STR, 2000, gstr('') * 2000))
    # --- keys ---
    c['bad-duplicate-key'] = header(0, 2) + kv('general.name', STR, gstr('a')) + kv('general.name', STR, gstr('b'))
    c['bad-duplicate-key-different-type'] = header(0, 2) + kv('x', U8, b'\1') + kv('x', STR, gstr('b'))
    # --- alignment ---
    for name, payload in [('0', (U32, u32(0))), ('3', (U32, u32(3))), ('2e21', (U32, u32(1 << 21))),
                          ('2e63', (U64, u64(1 << 63))), ('negative', (I32, u32(-32))),
                          ('string', (STR, gstr('32'))), ('f32', (F32, struct.pack('<f', 32.0))),
                          ('bool', (BOOL, b'\1')), ('array', (ARR, arr(U32, 1, u32(32))))]:
        c['bad-alignment-' + name] = header(0, 1) + kv('general.alignment', payload[0], payload[1])
    c['good-alignment-1'] = header(0, 1) + kv('general.alignment', U8, b'\1')
    c['good-alignment-2e20'] = header(0, 1) + kv('general.alignment', U64, u64(1 << 20))
    # Tensor offset that is a multiple of 32 but not of the declared 64.
    c['bad-alignment-misaligned-offset'] = with_data(
        header(1, 1) + kv('general.alignment', U32, u32(64)) + tinfo('t', [4], F32_T, 32), b'\0' * 96, 64)
    # --- tensors ---
    c['good-tensor-f32'] = f32_tensor_file([4])
    c['bad-tensor-n-dims-0'] = f32_tensor_file([])
    c['bad-tensor-n-dims-5'] = f32_tensor_file([1, 1, 1, 1, 1])
    c['bad-tensor-n-dims-max'] = f32_tensor_file([1], n_dims=0xFFFFFFFF)
    c['bad-tensor-dim-0'] = f32_tensor_file([4, 0])
    c['bad-tensor-dim-2e63'] = f32_tensor_file([1 << 63])
    c['bad-tensor-dim-max'] = f32_tensor_file([U64_MAX])
    c['bad-tensor-ne-product-overflow'] = f32_tensor_file([1 << 32, 1 << 32])
    c['bad-tensor-ne-product-overflow-4d'] = f32_tensor_file([1 << 16] * 4)
    c['bad-tensor-ne-product-int64-max'] = f32_tensor_file([(1 << 63) - 1, 2])
    c['bad-tensor-bytes-overflow-f64'] = f32_tensor_file([1 << 62], ggml_type=F64_T)
    c['bad-tensor-bytes-huge-f32'] = f32_tensor_file([1 << 61])
    c['bad-tensor-q4_0-partial-block'] = f32_tensor_file([33], ggml_type=Q4_0_T, data_bytes=64)
    c['bad-tensor-type-unknown-4'] = f32_tensor_file([4], ggml_type=4)
    c['bad-tensor-type-unknown-40'] = f32_tensor_file([4], ggml_type=40)
    c['bad-tensor-type-max'] = f32_tensor_file([4], ggml_type=0xFFFFFFFF)
    c['bad-tensor-offset-near-max'] = f32_tensor_file([4], offset=U64_MAX - 31)
    c['bad-tensor-offset-wraps'] = f32_tensor_file([1 << 40], offset=U64_MAX - 31)
    c['bad-tensor-offset-2e63'] = f32_tensor_file([4], offset=1 << 63)
    c['bad-tensor-offset-misaligned'] = f32_tensor_file([4], offset=4)
    c['bad-tensor-one-byte-short'] = f32_tensor_file([4], data_bytes=15)
    c['bad-tensor-past-end-by-offset'] = f32_tensor_file([4], offset=32, data_bytes=40)
    c['bad-tensor-data-missing'] = header(1, 0) + tinfo('t', [4], F32_T, 0)
    c['bad-tensor-name-length-huge'] = header(1, 0) + gstr('t', length=1 << 63) + b'\0' * 32
    c['bad-tensor-duplicate-name'] = with_data(
        header(2, 0) + tinfo('t', [4], F32_T, 0) + tinfo('t', [4], F32_T, 32), b'\0' * 64)
    # llama.cpp wants tensors back to back; pagellm wants no two sharing bytes.
    c['bad-tensors-overlapping'] = with_data(
        header(2, 0) + tinfo('a', [4], F32_T, 0) + tinfo('b', [2, 2], F32_T, 0), b'\x22' * 16)
    c['good-tensor-q8_0-at-end'] = with_data(header(1, 0) + tinfo('q', [32], Q8_0_T, 0), b'\x01' * 34)
    c['good-tensor-v2'] = with_data(header(1, 0, version=2) + tinfo('t', [2, 1, 1, 1], F16_T, 0), b'\0' * 4)
    return c


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), 'regressions', 'gguf')
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(cases().items()):
        with open(os.path.join(out, name + '.gguf'), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
