#!/usr/bin/env python3
"""Writes the safetensors fuzzing inputs kept in the tree.

  tests/fuzz/corpus/safetensors/seed-*        small valid files (the fuzzer's seed corpus)
  tests/fuzz/regressions/safetensors/bad-*    hostile files that must be rejected with pagellm::Error
  tests/fuzz/regressions/safetensors/good-*   unusual but valid files that must parse

Read by tests/format/safetensors_regression_test.cc. Layout (safetensors README, "Format"):
u64 little-endian header length N | N bytes of JSON | data section.

Usage: tests/fuzz/make_safetensors_inputs.py [repository root]
"""
import json
import os
import struct
import sys


def st(header, data=b'', pad=0, length=None):
    """A safetensors file from a header (dict, or raw bytes/str) and its data section."""
    if isinstance(header, dict):
        text = json.dumps(header, separators=(',', ':')).encode()
    elif isinstance(header, str):
        text = header.encode()
    else:
        text = header
    text += b' ' * pad
    n = len(text) if length is None else length
    return struct.pack('<Q', n & (2**64 - 1)) + text + data


def t(dtype, shape, begin, end):
    return {'dtype': dtype, 'shape': shape, 'data_offsets': [begin, end]}


def f32(*xs):
    return struct.pack('<%df' % len(xs), *xs)


def seeds():
    yield 'seed-empty.safetensors', st({})
    yield 'seed-metadata.safetensors', st({'__metadata__': {'format': 'pt', 'lm_head.weight': 'model.embed_tokens.weight'}})
    yield 'seed-one-f32.safetensors', st({'w': t('F32', [2, 3], 0, 24)}, f32(*range(6)))
    # Every dtype the reader knows, one after another; padded to 8 bytes as the writer pads.
    dtypes = [('BOOL', 1), ('U8', 1), ('I8', 1), ('F8_E4M3', 1), ('F8_E5M2', 1), ('I16', 2), ('U16', 2),
              ('F16', 2), ('BF16', 2), ('I32', 4), ('U32', 4), ('F32', 4), ('F64', 8), ('I64', 8), ('U64', 8)]
    header, off = {}, 0
    for i, (d, size) in enumerate(dtypes):
        header['t%02d.%s' % (i, d.lower())] = t(d, [3], off, off + 3 * size)
        off += 3 * size
    yield 'seed-all-dtypes.safetensors', st(header, bytes(range(off)), pad=(8 - len(json.dumps(header, separators=(',', ':'))) % 8) % 8)
    # A tiny llama-shaped file with a scalar, an empty tensor and a 4-D one.
    names = {'model.embed_tokens.weight': [8, 4], 'model.layers.0.input_layernorm.weight': [4],
             'model.layers.0.self_attn.q_proj.weight': [4, 4], 'model.norm.weight': [4],
             'scalar': [], 'empty': [0, 4], 'four_d': [1, 2, 1, 2]}
    header, data = {'__metadata__': {'format': 'pt'}}, b''
    for name, shape in names.items():
        n = 1
        for d in shape:
            n *= d
        header[name] = t('BF16', shape, len(data), len(data) + 2 * n)
        data += bytes((i * 7) & 0xFF for i in range(2 * n))
    yield 'seed-tiny-llama.safetensors', st(header, data)


def bad():
    one = {'w': t('F32', [2], 0, 8)}
    d8 = f32(1, 2)
    yield 'bad-empty-file', b''
    yield 'bad-seven-bytes', b'\x02\x00\x00\x00\x00\x00\x00'
    yield 'bad-header-length-past-end', st(one, d8, length=10**6)
    yield 'bad-header-length-u64-max', st(one, d8, length=2**64 - 1)
    yield 'bad-header-length-over-100mib', st(one, d8, length=(100 << 20) + 1)
    yield 'bad-header-not-json', st('{"w": {"dtype": "F32",', d8)
    yield 'bad-header-invalid-utf8', st(b'{"\xff\xfe": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', d8)
    yield 'bad-header-is-array', st('[1, 2, 3]', d8)
    yield 'bad-header-is-string', st('"model"', d8)
    yield 'bad-header-zero-length', st(b'', d8)
    yield 'bad-entry-not-object', st({'w': [0, 8]}, d8)
    yield 'bad-dtype-missing', st({'w': {'shape': [2], 'data_offsets': [0, 8]}}, d8)
    yield 'bad-dtype-unknown', st({'w': t('Q4_K', [2], 0, 8)}, d8)
    yield 'bad-dtype-lowercase', st({'w': t('f32', [2], 0, 8)}, d8)
    yield 'bad-dtype-number', st({'w': {'dtype': 4, 'shape': [2], 'data_offsets': [0, 8]}}, d8)
    yield 'bad-shape-missing', st({'w': {'dtype': 'F32', 'data_offsets': [0, 8]}}, d8)
    yield 'bad-shape-negative', st({'w': t('F32', [-2], 0, 8)}, d8)
    yield 'bad-shape-float', st({'w': t('F32', [2.0], 0, 8)}, d8)
    yield 'bad-shape-string', st({'w': t('F32', ['2'], 0, 8)}, d8)
    yield 'bad-shape-nine-dims', st({'w': t('F32', [1] * 8 + [2], 0, 8)}, d8)
    yield 'bad-shape-dim-2pow41', st({'w': t('F32', [2**41], 0, 8)}, d8)
    yield 'bad-shape-dim-u64-max', st('{"w":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}}', d8)
    yield 'bad-shape-product-overflow', st({'w': t('F32', [2**40, 2**40, 2**40], 0, 8)}, d8)
    yield 'bad-shape-nested-deep', st('{"w":{"dtype":"F32","shape":' + '[' * 20000 + ']' * 20000 + ',"data_offsets":[0,8]}}', d8)
    yield 'bad-offsets-missing', st({'w': {'dtype': 'F32', 'shape': [2]}}, d8)
    yield 'bad-offsets-one-number', st({'w': {'dtype': 'F32', 'shape': [2], 'data_offsets': [8]}}, d8)
    yield 'bad-offsets-negative', st({'w': t('F32', [2], -8, 0)}, d8)
    yield 'bad-offsets-reversed', st({'w': t('F32', [2], 8, 0)}, d8)
    yield 'bad-offsets-past-end', st({'w': t('F32', [2], 4, 12)}, d8)
    yield 'bad-offsets-u64-max', st('{"w":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,18446744073709551615]}}', d8)
    yield 'bad-offsets-span-too-short', st({'w': t('F32', [2], 0, 4)}, d8)
    yield 'bad-offsets-span-too-long', st({'w': t('F32', [1], 0, 8)}, d8)
    yield 'bad-offsets-overlap', st({'a': t('F32', [2], 0, 8), 'b': t('F32', [1], 4, 8)}, d8)
    yield 'bad-offsets-same-range', st({'a': t('F32', [2], 0, 8), 'b': t('F32', [2], 0, 8)}, d8)
    yield 'bad-metadata-not-object', st({'__metadata__': ['pt'], **one}, d8)
    yield 'bad-metadata-value-not-string', st({'__metadata__': {'format': 1}, **one}, d8)
    yield 'bad-metadata-value-nested-deep', st('{"__metadata__":{"k":' + '{"a":' * 20000 + '1' + '}' * 20000 + '}}', d8)


def good():
    d8 = f32(1, 2)
    yield 'good-header-padded-with-spaces', st({'w': t('F32', [2], 0, 8)}, d8, pad=37)
    yield 'good-trailing-bytes-after-data', st({'w': t('F32', [2], 0, 8)}, d8 + b'\0' * 100)
    yield 'good-unordered-offsets', st({'b': t('F32', [1], 4, 8), 'a': t('F32', [1], 0, 4)}, d8)
    yield 'good-empty-tensors-share-an-offset', st({'a': t('F32', [0], 4, 4), 'b': t('F32', [0, 3], 4, 4), 'w': t('F32', [2], 0, 8)}, d8)
    yield 'good-unaligned-offset', st({'a': t('U8', [1], 0, 1), 'w': t('F32', [1], 1, 5)}, d8)
    yield 'good-no-data-section', st({})
    yield 'good-unicode-names', st({'模型.权重': t('F32', [2], 0, 8)}, d8)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    for sub, gen in (('corpus/safetensors', seeds), ('regressions/safetensors', bad), ('regressions/safetensors', good)):
        out = os.path.join(root, 'tests/fuzz', sub)
        os.makedirs(out, exist_ok=True)
        for name, data in gen():
            with open(os.path.join(out, name), 'wb') as f:
                f.write(data)


if __name__ == '__main__':
    main()
