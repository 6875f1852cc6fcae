/*
 * avro_guard.h — internal interface between the codec (codec.c) and the
 * bounded Avro binary validator (avro_guard.c). Not installed; only
 * libax/src/adapters/ and the codec tests include it.
 */
#ifndef AX_ADAPTERS_AVRO_GUARD_H
#define AX_ADAPTERS_AVRO_GUARD_H

#include <stddef.h>
#include <stdint.h>

#include <avro.h>

#include "ax/codec.h"

/* Deepest nesting of records/unions/arrays/maps the walk accepts. Our
 * schemas need 4; the cap only exists so a recursive schema cannot make the
 * walk (or avro-c after it) recurse without bound. */
#define AX__AVRO_GUARD_MAX_DEPTH 32

/* Walk `len` bytes of Avro binary against `schema` (see codec.h for the
 * rules). `base` is added to every offset in error messages, so decoders
 * can report offsets from the start of the framed message. Strings must be
 * valid UTF-8 without NUL bytes. Returns 0 or AX_ERR_INVALID with a reason. */
int ax__avro_guard_walk(avro_schema_t schema, const void *avro, size_t len,
                        size_t base, char *errbuf, size_t errlen);

/* 1 if s[0..len) is well-formed UTF-8 (no overlongs, no surrogates, at most
 * U+10FFFF) and contains no NUL byte; otherwise 0 and, if ret_bad is not
 * NULL, the index of the first byte of the first bad sequence (or of the
 * NUL). */
int ax__utf8_check(const char *s, size_t len, size_t *ret_bad);

/* The parsed schema for a wire id (initialising the codec on first use),
 * or NULL if the id is unknown or the schemas failed to parse. Defined in
 * codec.c. */
avro_schema_t ax__codec_schema(int32_t schema_id, char *errbuf, size_t errlen);

/* The avro-c (generic value) encoders the direct ones replaced, kept for
 * test_codec to compare their bytes with. Defined in codec.c. */
int ax__dispatch_encode_avro(const ax_dispatch_t *m, void **ret_buf, size_t *ret_len);
int ax__attempt_encode_avro(const ax_attempt_t *m, void **ret_buf, size_t *ret_len);
int ax__result_encode_avro(const ax_result_t *m, void **ret_buf, size_t *ret_len);
/* The avro-c decoders the direct ones replaced (Submit, Dispatch, Attempt
 * id 5; ax_attempt_decode still reads id 3 through this one), kept for
 * test_codec_direct. Defined in codec.c. */
int ax__submit_decode_avro(const void *buf, size_t len, ax_submit_t *ret, char *errbuf,
                           size_t errlen);
int ax__dispatch_decode_avro(const void *buf, size_t len, ax_dispatch_t *ret, char *errbuf,
                             size_t errlen);
int ax__attempt_decode_avro(const void *buf, size_t len, ax_attempt_t *ret, char *errbuf,
                            size_t errlen);

#endif
