#ifndef AGENT_TPM_H
#define AGENT_TPM_H

#include <stddef.h>
#include <stdint.h>

/* The TPM calls the agent makes for DPoP keys held by the TPM (docs/SECURITY.md, "DPoP keys held by the TPM"), over
 * tpm2-tss's ESYS and TCTI loader. Every function returns a TSS2_RC (0 on success) and is blocking: the Swift side
 * (TPMKeys.TPMCaller) runs them on one serial queue of its own and answers its caller at a deadline. No function keeps
 * anything of its arguments; nothing secret passes through here (the private part is the TPM's wrapped blob). */

typedef struct aa_tpm aa_tpm;

/* Where in a call a failure came from, so the Swift side can tell "the TPM refused this key" (loading it) from "the
 * TPM did not answer". */
enum aa_tpm_stage {
    AA_TPM_STAGE_CONNECT = 1,
    AA_TPM_STAGE_PRIMARY = 2,
    AA_TPM_STAGE_CREATE = 3,
    AA_TPM_STAGE_LOAD = 4,
    AA_TPM_STAGE_SIGN = 5,
    AA_TPM_STAGE_BLOB = 6,
};

/* The largest marshalled key (TPM2B_PUBLIC + TPM2B_PRIVATE) the agent handles. */
#define AA_TPM_BLOB_MAX 2048

/* Opens `tcti` (a tpm2-tss TCTI string, "device:/dev/tpmrm0", "swtpm:host=127.0.0.1,port=2321"), starts ESYS and
 * flushes the transient objects this connection can see (a previous run killed mid-call may have left its own). */
uint32_t aa_tpm_open(const char *tcti, aa_tpm **out);
void aa_tpm_close(aa_tpm *tpm);

/* Asks the TPM for one random byte: whether it answers at all. */
uint32_t aa_tpm_probe(aa_tpm *tpm, int *stage);

/* Makes an ECDSA P-256/SHA-256 signing key under the owner hierarchy's primary storage key (made from the owner seed
 * with a fixed template, so the same TPM always makes the same one): fixedTPM, fixedParent, sensitiveDataOrigin,
 * userWithAuth with an empty auth, noDA, sign only, no policy, no PCRs. `blob` gets the marshalled TPM2B_PUBLIC
 * followed by the TPM2B_PRIVATE (wrapped by the primary: only this TPM can load it); `x`/`y` the public point as the
 * TPM gave it (at most 66 bytes each). */
uint32_t aa_tpm_create(aa_tpm *tpm, uint8_t *blob, size_t blob_cap, size_t *blob_len,
                       uint8_t *x, size_t *x_len, uint8_t *y, size_t *y_len, int *stage);

/* Loads `blob` under the primary, signs the 32-byte `digest` (ECDSA, SHA-256) and flushes the key. `r` and `s` as the
 * TPM gave them (at most 66 bytes each; some stacks strip leading zeros: the Swift side pads). */
uint32_t aa_tpm_sign(aa_tpm *tpm, const uint8_t *blob, size_t blob_len, const uint8_t *digest,
                     uint8_t *r, size_t *r_len, uint8_t *s, size_t *s_len, int *stage);

/* tpm2-tss's words for `rc` (static storage). */
const char *aa_tpm_rc_text(uint32_t rc);

#endif
