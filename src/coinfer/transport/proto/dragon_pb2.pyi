from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Hello(_message.Message):
    __slots__ = ("version", "question", "top_k", "temperature", "sampling_top_k", "sampling_top_p", "seed", "max_tokens", "prompt_style", "vocab_size", "tokenizer_digest", "cloud_aggregates", "transfer_top_p", "transfer_max_ids", "retrieval", "relevance_temperature", "chunk_chars", "lookahead", "scheduled", "rescore_every", "both_aggregate")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_TOP_K_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_TOP_P_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_STYLE_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CLOUD_AGGREGATES_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_TOP_P_FIELD_NUMBER: _ClassVar[int]
    TRANSFER_MAX_IDS_FIELD_NUMBER: _ClassVar[int]
    RETRIEVAL_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_CHARS_FIELD_NUMBER: _ClassVar[int]
    LOOKAHEAD_FIELD_NUMBER: _ClassVar[int]
    SCHEDULED_FIELD_NUMBER: _ClassVar[int]
    RESCORE_EVERY_FIELD_NUMBER: _ClassVar[int]
    BOTH_AGGREGATE_FIELD_NUMBER: _ClassVar[int]
    version: int
    question: str
    top_k: int
    temperature: float
    sampling_top_k: int
    sampling_top_p: float
    seed: int
    max_tokens: int
    prompt_style: str
    vocab_size: int
    tokenizer_digest: bytes
    cloud_aggregates: bool
    transfer_top_p: float
    transfer_max_ids: int
    retrieval: str
    relevance_temperature: float
    chunk_chars: int
    lookahead: int
    scheduled: bool
    rescore_every: int
    both_aggregate: bool
    def __init__(self, version: _Optional[int] = ..., question: _Optional[str] = ..., top_k: _Optional[int] = ..., temperature: _Optional[float] = ..., sampling_top_k: _Optional[int] = ..., sampling_top_p: _Optional[float] = ..., seed: _Optional[int] = ..., max_tokens: _Optional[int] = ..., prompt_style: _Optional[str] = ..., vocab_size: _Optional[int] = ..., tokenizer_digest: _Optional[bytes] = ..., cloud_aggregates: _Optional[bool] = ..., transfer_top_p: _Optional[float] = ..., transfer_max_ids: _Optional[int] = ..., retrieval: _Optional[str] = ..., relevance_temperature: _Optional[float] = ..., chunk_chars: _Optional[int] = ..., lookahead: _Optional[int] = ..., scheduled: _Optional[bool] = ..., rescore_every: _Optional[int] = ..., both_aggregate: _Optional[bool] = ...) -> None: ...

class Ready(_message.Message):
    __slots__ = ("documents", "prefill_s", "max_tokens", "refused")
    DOCUMENTS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_S_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    documents: int
    prefill_s: float
    max_tokens: int
    refused: str
    def __init__(self, documents: _Optional[int] = ..., prefill_s: _Optional[float] = ..., max_tokens: _Optional[int] = ..., refused: _Optional[str] = ...) -> None: ...

class Draft(_message.Message):
    __slots__ = ("position", "epoch", "token", "dist", "log_h", "decode_s", "parent")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    DIST_FIELD_NUMBER: _ClassVar[int]
    LOG_H_FIELD_NUMBER: _ClassVar[int]
    DECODE_S_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    position: int
    epoch: int
    token: int
    dist: bytes
    log_h: float
    decode_s: float
    parent: int
    def __init__(self, position: _Optional[int] = ..., epoch: _Optional[int] = ..., token: _Optional[int] = ..., dist: _Optional[bytes] = ..., log_h: _Optional[float] = ..., decode_s: _Optional[float] = ..., parent: _Optional[int] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("position", "token", "device_accepted", "cloud_accepted", "handover", "profile")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    CLOUD_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    HANDOVER_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    position: int
    token: int
    device_accepted: bool
    cloud_accepted: bool
    handover: bool
    profile: Profile
    def __init__(self, position: _Optional[int] = ..., token: _Optional[int] = ..., device_accepted: _Optional[bool] = ..., cloud_accepted: _Optional[bool] = ..., handover: _Optional[bool] = ..., profile: _Optional[_Union[Profile, _Mapping]] = ...) -> None: ...

class Profile(_message.Message):
    __slots__ = ("device_decode_s", "cloud_decode_s", "device_acceptance", "cloud_acceptance", "rtt_s")
    DEVICE_DECODE_S_FIELD_NUMBER: _ClassVar[int]
    CLOUD_DECODE_S_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ACCEPTANCE_FIELD_NUMBER: _ClassVar[int]
    CLOUD_ACCEPTANCE_FIELD_NUMBER: _ClassVar[int]
    RTT_S_FIELD_NUMBER: _ClassVar[int]
    device_decode_s: float
    cloud_decode_s: float
    device_acceptance: float
    cloud_acceptance: float
    rtt_s: float
    def __init__(self, device_decode_s: _Optional[float] = ..., cloud_decode_s: _Optional[float] = ..., device_acceptance: _Optional[float] = ..., cloud_acceptance: _Optional[float] = ..., rtt_s: _Optional[float] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class Pong(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class Done(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class Envelope(_message.Message):
    __slots__ = ("hello", "ready", "draft", "decision", "done", "ping", "pong")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    DRAFT_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    ready: Ready
    draft: Draft
    decision: Decision
    done: Done
    ping: Ping
    pong: Pong
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., ready: _Optional[_Union[Ready, _Mapping]] = ..., draft: _Optional[_Union[Draft, _Mapping]] = ..., decision: _Optional[_Union[Decision, _Mapping]] = ..., done: _Optional[_Union[Done, _Mapping]] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ..., pong: _Optional[_Union[Pong, _Mapping]] = ...) -> None: ...
