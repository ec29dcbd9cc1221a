/* AES-256-GCM from OpenSSL's libcrypto (EVP), over bigarrays.

   Each key holds two EVP contexts (one to seal, one to open) keyed once;
   a call sets only the 12-byte nonce. The functions never allocate in the
   OCaml heap and never raise: the OCaml side checks every bound before the
   call, and the result says whether libcrypto succeeded (and, for open,
   whether the tag was right). The runtime lock is kept: a key's contexts
   are mutable state shared by every caller of that key, and the engine
   that calls them is single-threaded. */

#if defined(__has_include)
#if !__has_include(<openssl/evp.h>)
#error "consort.crypto needs OpenSSL's libcrypto headers (openssl/evp.h): install libssl-dev (scripts/deps.sh does)"
#endif
#endif

#include <string.h>
#include <openssl/evp.h>
#include <openssl/opensslv.h>
#include <caml/mlvalues.h>
#include <caml/alloc.h>
#include <caml/memory.h>
#include <caml/fail.h>
#include <caml/custom.h>
#include <caml/bigarray.h>

#if OPENSSL_VERSION_NUMBER < 0x10100000L
#error "consort.crypto needs OpenSSL 1.1 or later (libssl-dev)"
#endif

struct gcm_key {
  EVP_CIPHER_CTX *enc;
  EVP_CIPHER_CTX *dec;
};

#define Gcm_key(v) ((struct gcm_key *)Data_custom_val(v))

static void gcm_finalize(value v)
{
  struct gcm_key *k = Gcm_key(v);
  if (k->enc != NULL) EVP_CIPHER_CTX_free(k->enc);
  if (k->dec != NULL) EVP_CIPHER_CTX_free(k->dec);
  k->enc = NULL;
  k->dec = NULL;
}

static struct custom_operations gcm_ops = {
  "consort.cap.gcm",
  gcm_finalize,
  custom_compare_default,
  custom_hash_default,
  custom_serialize_default,
  custom_deserialize_default,
  custom_compare_ext_default,
  custom_fixed_length_default
};

static value aead_create(const EVP_CIPHER *cipher, value key, const char *name)
{
  CAMLparam1(key);
  CAMLlocal1(v);
  unsigned char raw[32];
  if (caml_string_length(key) != 32) caml_invalid_argument(name);
  memcpy(raw, String_val(key), 32);
  v = caml_alloc_custom_mem(&gcm_ops, sizeof(struct gcm_key), 2 * 1024);
  struct gcm_key *k = Gcm_key(v);
  k->enc = EVP_CIPHER_CTX_new();
  k->dec = EVP_CIPHER_CTX_new();
  int ok = k->enc != NULL && k->dec != NULL
    && EVP_EncryptInit_ex(k->enc, cipher, NULL, raw, NULL) == 1
    && EVP_DecryptInit_ex(k->dec, cipher, NULL, raw, NULL) == 1;
  OPENSSL_cleanse(raw, sizeof raw);
  if (!ok) {
    gcm_finalize(v);
    caml_failwith("libcrypto could not set up an AEAD key");
  }
  CAMLreturn(v);
}

/* [key] is a 32-byte string (checked in OCaml). */
value consort_gcm_create(value key)
{
  return aead_create(EVP_aes_256_gcm(), key, "Gcm.of_secret: the key must be 32 bytes");
}

/* ChaCha20-Poly1305 (RFC 8439): the same contexts, another cipher. */
value consort_chacha_create(value key)
{
  return aead_create(EVP_chacha20_poly1305(), key, "Chacha.of_secret: the key must be 32 bytes");
}

static unsigned char *ba_at(value ba, value off)
{
  return (unsigned char *)Caml_ba_data_val(ba) + Long_val(off);
}

/* Seals [len] bytes at [src]+[soff] into [dst]+[doff]: the ciphertext, then
   the 16-byte tag. [src] and [dst] may be the same bytes. The nonce is 12
   bytes; all bounds are checked by the caller. */
value consort_gcm_seal(value key, value nonce, value adata, value src, value soff, value vlen, value dst,
                       value doff)
{
  EVP_CIPHER_CTX *c = Gcm_key(key)->enc;
  int len = Int_val(vlen), outl = 0;
  unsigned char *in = ba_at(src, soff), *out = ba_at(dst, doff);
  if (c == NULL) return Val_false;
  if (EVP_EncryptInit_ex(c, NULL, NULL, NULL, (const unsigned char *)String_val(nonce)) != 1) return Val_false;
  if (caml_string_length(adata) > 0
      && EVP_EncryptUpdate(c, NULL, &outl, (const unsigned char *)String_val(adata), caml_string_length(adata)) != 1)
    return Val_false;
  if (len > 0 && (EVP_EncryptUpdate(c, out, &outl, in, len) != 1 || outl != len)) return Val_false;
  if (EVP_EncryptFinal_ex(c, out + len, &outl) != 1) return Val_false;
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, out + len) != 1) return Val_false;
  return Val_true;
}

value consort_gcm_seal_bc(value *argv, int argn)
{
  (void)argn;
  return consort_gcm_seal(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7]);
}

/* Opens [len] bytes of ciphertext at [src]+[soff] followed by their 16-byte
   tag, into [dst]+[doff] ([len] bytes; may be the same bytes as the
   ciphertext). False if the tag is wrong: then [dst] holds bytes that must
   not be used. */
value consort_gcm_open(value key, value nonce, value adata, value src, value soff, value vlen, value dst,
                       value doff)
{
  EVP_CIPHER_CTX *c = Gcm_key(key)->dec;
  int len = Int_val(vlen), outl = 0;
  unsigned char *in = ba_at(src, soff), *out = ba_at(dst, doff);
  unsigned char tag[16];
  if (c == NULL) return Val_false;
  memcpy(tag, in + len, 16);
  if (EVP_DecryptInit_ex(c, NULL, NULL, NULL, (const unsigned char *)String_val(nonce)) != 1) return Val_false;
  if (caml_string_length(adata) > 0
      && EVP_DecryptUpdate(c, NULL, &outl, (const unsigned char *)String_val(adata), caml_string_length(adata)) != 1)
    return Val_false;
  if (len > 0 && (EVP_DecryptUpdate(c, out, &outl, in, len) != 1 || outl != len)) return Val_false;
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, 16, tag) != 1) return Val_false;
  if (EVP_DecryptFinal_ex(c, out + len, &outl) != 1) return Val_false;
  return Val_true;
}

value consort_gcm_open_bc(value *argv, int argn)
{
  (void)argn;
  return consort_gcm_open(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7]);
}

/* Seals the concatenation of [pre_len] bytes at [pre]+[pre_off] (a
   bigarray) and [body_len] bytes of the OCaml string [body] from
   [body_off], into [dst]+[doff]: the ciphertext, then the tag. [body] is
   read in place: nothing here can run the GC. Bounds are checked by the
   caller; [dst] may begin where the prefix does. */
value consort_gcm_seal2(value key, value nonce, value adata, value pre, value pre_off, value pre_len, value body,
                        value body_off, value body_len, value dst, value doff)
{
  EVP_CIPHER_CTX *c = Gcm_key(key)->enc;
  int plen = Int_val(pre_len), blen = Int_val(body_len), outl = 0;
  unsigned char *in = ba_at(pre, pre_off), *out = ba_at(dst, doff);
  const unsigned char *b = (const unsigned char *)String_val(body) + Long_val(body_off);
  if (c == NULL) return Val_false;
  if (EVP_EncryptInit_ex(c, NULL, NULL, NULL, (const unsigned char *)String_val(nonce)) != 1) return Val_false;
  if (caml_string_length(adata) > 0
      && EVP_EncryptUpdate(c, NULL, &outl, (const unsigned char *)String_val(adata), caml_string_length(adata)) != 1)
    return Val_false;
  if (plen > 0 && (EVP_EncryptUpdate(c, out, &outl, in, plen) != 1 || outl != plen)) return Val_false;
  if (blen > 0 && (EVP_EncryptUpdate(c, out + plen, &outl, b, blen) != 1 || outl != blen)) return Val_false;
  if (EVP_EncryptFinal_ex(c, out + plen + blen, &outl) != 1) return Val_false;
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, 16, out + plen + blen) != 1) return Val_false;
  return Val_true;
}

value consort_gcm_seal2_bc(value *argv, int argn)
{
  (void)argn;
  return consort_gcm_seal2(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7], argv[8], argv[9],
                           argv[10]);
}

/* Seal and open with the additional data in a bigarray, for either
   cipher: [adata] is [alen] bytes at [aba]+[aoff]. Same rules as above. */
value consort_aead_seal_ba(value key, value nonce, value aba, value aoff, value alen, value src, value soff,
                           value vlen, value dst, value doff)
{
  EVP_CIPHER_CTX *c = Gcm_key(key)->enc;
  int len = Int_val(vlen), al = Int_val(alen), outl = 0;
  unsigned char *in = ba_at(src, soff), *out = ba_at(dst, doff), *ad = ba_at(aba, aoff);
  if (c == NULL) return Val_false;
  if (EVP_EncryptInit_ex(c, NULL, NULL, NULL, (const unsigned char *)String_val(nonce)) != 1) return Val_false;
  if (al > 0 && EVP_EncryptUpdate(c, NULL, &outl, ad, al) != 1) return Val_false;
  if (len > 0 && (EVP_EncryptUpdate(c, out, &outl, in, len) != 1 || outl != len)) return Val_false;
  if (EVP_EncryptFinal_ex(c, out + len, &outl) != 1) return Val_false;
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_GET_TAG, 16, out + len) != 1) return Val_false;
  return Val_true;
}

value consort_aead_seal_ba_bc(value *argv, int argn)
{
  (void)argn;
  return consort_aead_seal_ba(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7], argv[8],
                              argv[9]);
}

value consort_aead_open_ba(value key, value nonce, value aba, value aoff, value alen, value src, value soff,
                           value vlen, value dst, value doff)
{
  EVP_CIPHER_CTX *c = Gcm_key(key)->dec;
  int len = Int_val(vlen), al = Int_val(alen), outl = 0;
  unsigned char *in = ba_at(src, soff), *out = ba_at(dst, doff), *ad = ba_at(aba, aoff);
  unsigned char tag[16];
  if (c == NULL) return Val_false;
  memcpy(tag, in + len, 16);
  if (EVP_DecryptInit_ex(c, NULL, NULL, NULL, (const unsigned char *)String_val(nonce)) != 1) return Val_false;
  if (al > 0 && EVP_DecryptUpdate(c, NULL, &outl, ad, al) != 1) return Val_false;
  if (len > 0 && (EVP_DecryptUpdate(c, out, &outl, in, len) != 1 || outl != len)) return Val_false;
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_AEAD_SET_TAG, 16, tag) != 1) return Val_false;
  if (EVP_DecryptFinal_ex(c, out + len, &outl) != 1) return Val_false;
  return Val_true;
}

value consort_aead_open_ba_bc(value *argv, int argn)
{
  (void)argn;
  return consort_aead_open_ba(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7], argv[8],
                              argv[9]);
}

/* Opening in two steps, for a receiver that learns where the bulk of a
   message goes only from its first bytes. [open_head] starts: the nonce,
   the additional data, and the first [hlen] bytes of ciphertext decrypted
   into [dst] (not yet authenticated). [open_rest] goes on with the next
   [len] bytes, decrypted into the OCaml bytes [dst] from [dpos], then
   checks the tag at [tag]+[toff]: false if it is wrong (then every byte
   written is meaningless). Nothing runs between the two calls that uses
   the key; a later call starts afresh. */
value consort_gcm_open_head(value key, value nonce, value adata, value src, value soff, value hlen, value dst,
                            value doff)
{
  EVP_CIPHER_CTX *c = Gcm_key(key)->dec;
  int len = Int_val(hlen), outl = 0;
  unsigned char *in = ba_at(src, soff), *out = ba_at(dst, doff);
  if (c == NULL) return Val_false;
  if (EVP_DecryptInit_ex(c, NULL, NULL, NULL, (const unsigned char *)String_val(nonce)) != 1) return Val_false;
  if (caml_string_length(adata) > 0
      && EVP_DecryptUpdate(c, NULL, &outl, (const unsigned char *)String_val(adata), caml_string_length(adata)) != 1)
    return Val_false;
  if (len > 0 && (EVP_DecryptUpdate(c, out, &outl, in, len) != 1 || outl != len)) return Val_false;
  return Val_true;
}

value consort_gcm_open_head_bc(value *argv, int argn)
{
  (void)argn;
  return consort_gcm_open_head(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7]);
}

value consort_gcm_open_rest(value key, value src, value soff, value vlen, value dst, value dpos, value tagba,
                            value toff)
{
  EVP_CIPHER_CTX *c = Gcm_key(key)->dec;
  int len = Int_val(vlen), outl = 0;
  unsigned char *in = ba_at(src, soff);
  unsigned char *out = Bytes_val(dst) + Long_val(dpos);
  unsigned char tag[16];
  if (c == NULL) return Val_false;
  memcpy(tag, ba_at(tagba, toff), 16);
  if (len > 0 && (EVP_DecryptUpdate(c, out, &outl, in, len) != 1 || outl != len)) return Val_false;
  if (EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, 16, tag) != 1) return Val_false;
  unsigned char fin[16];
  if (EVP_DecryptFinal_ex(c, fin, &outl) != 1) return Val_false;
  return Val_true;
}

value consort_gcm_open_rest_bc(value *argv, int argn)
{
  (void)argn;
  return consort_gcm_open_rest(argv[0], argv[1], argv[2], argv[3], argv[4], argv[5], argv[6], argv[7]);
}
