"""The encoders of structured values (docs/security.md#values-without-pickle), looked up by the
native codec on first use. JSON is orjson's when it is installed (the ``orjson`` extra: the same
text, several times faster, ``benches/ab/serializers.py``), else the standard library's; both
read what either writes. The native codec checks every value before it gets here (exact types,
finite floats, ints within 64 bits, str keys, depth) and every stored value before it is
decoded, so these see only what they agree on."""

from __future__ import annotations

import json as _json
from typing import Any, Callable

_encode = _json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
_decode = _json.JSONDecoder().decode


def _stdlib_dumps(value: Any) -> bytes:
    return _encode(value).encode()


def _stdlib_loads(data: bytes) -> Any:
    return _decode(data.decode())


json_dumps: Callable[[Any], bytes] = _stdlib_dumps
json_loads: Callable[[bytes], Any] = _stdlib_loads
JSON = "json"
try:
    import orjson as _orjson
except ImportError:
    pass
else:
    JSON = "orjson"
    json_dumps = _orjson.dumps
    json_loads = _orjson.loads
