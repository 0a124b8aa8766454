#include "agent_tpm.h"

#include <stdlib.h>
#include <string.h>
#include <tss2/tss2_esys.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_rc.h>
#include <tss2/tss2_tctildr.h>

struct aa_tpm {
    TSS2_TCTI_CONTEXT *tcti;
    ESYS_CONTEXT *esys;
    /* The owner hierarchy's primary storage key, made on first use and kept while the connection lasts. */
    ESYS_TR primary;
};

/* Frees what ESYS allocated for an output (NULL is fine). */
#define AA_FREE(p) do { Esys_Free(p); (p) = NULL; } while (0)

static void flush_leftovers(aa_tpm *tpm) {
    TPMS_CAPABILITY_DATA *data = NULL;
    TPMI_YES_NO more = 0;
    if (Esys_GetCapability(tpm->esys, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, TPM2_CAP_HANDLES,
                           TPM2_TRANSIENT_FIRST, TPM2_MAX_CAP_HANDLES, &more, &data) != TSS2_RC_SUCCESS) {
        return;
    }
    for (UINT32 i = 0; i < data->data.handles.count; i++) {
        ESYS_TR object = ESYS_TR_NONE;
        if (Esys_TR_FromTPMPublic(tpm->esys, data->data.handles.handle[i], ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE,
                                  &object) == TSS2_RC_SUCCESS) {
            Esys_FlushContext(tpm->esys, object);
        }
    }
    AA_FREE(data);
}

uint32_t aa_tpm_open(const char *tcti, aa_tpm **out) {
    *out = NULL;
    aa_tpm *tpm = calloc(1, sizeof *tpm);
    if (tpm == NULL) return TSS2_BASE_RC_MEMORY;
    tpm->primary = ESYS_TR_NONE;
    TSS2_RC rc = Tss2_TctiLdr_Initialize(tcti, &tpm->tcti);
    if (rc != TSS2_RC_SUCCESS) {
        free(tpm);
        return rc;
    }
    rc = Esys_Initialize(&tpm->esys, tpm->tcti, NULL);
    if (rc != TSS2_RC_SUCCESS) {
        Tss2_TctiLdr_Finalize(&tpm->tcti);
        free(tpm);
        return rc;
    }
    flush_leftovers(tpm);
    *out = tpm;
    return TSS2_RC_SUCCESS;
}

void aa_tpm_close(aa_tpm *tpm) {
    if (tpm == NULL) return;
    if (tpm->primary != ESYS_TR_NONE) Esys_FlushContext(tpm->esys, tpm->primary);
    Esys_Finalize(&tpm->esys);
    Tss2_TctiLdr_Finalize(&tpm->tcti);
    free(tpm);
}

uint32_t aa_tpm_probe(aa_tpm *tpm, int *stage) {
    *stage = AA_TPM_STAGE_CONNECT;
    TPM2B_DIGEST *random = NULL;
    TSS2_RC rc = Esys_GetRandom(tpm->esys, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, 1, &random);
    AA_FREE(random);
    return rc;
}

/* The usual storage root key template (TCG's "EK/SRK" style): ECC P-256, AES-128-CFB, restricted decrypt. */
static uint32_t ensure_primary(aa_tpm *tpm) {
    if (tpm->primary != ESYS_TR_NONE) return TSS2_RC_SUCCESS;
    TPM2B_SENSITIVE_CREATE sensitive = {0};
    TPM2B_PUBLIC template = {
        .publicArea = {
            .type = TPM2_ALG_ECC,
            .nameAlg = TPM2_ALG_SHA256,
            .objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_SENSITIVEDATAORIGIN
                | TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_NODA | TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_DECRYPT,
            .parameters.eccDetail = {
                .symmetric = { .algorithm = TPM2_ALG_AES, .keyBits.aes = 128, .mode.aes = TPM2_ALG_CFB },
                .scheme = { .scheme = TPM2_ALG_NULL },
                .curveID = TPM2_ECC_NIST_P256,
                .kdf = { .scheme = TPM2_ALG_NULL },
            },
        },
    };
    TPM2B_DATA outside = {0};
    TPML_PCR_SELECTION pcrs = {0};
    return Esys_CreatePrimary(tpm->esys, ESYS_TR_RH_OWNER, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &sensitive,
                              &template, &outside, &pcrs, &tpm->primary, NULL, NULL, NULL, NULL);
}

static int copy_point(const TPM2B_ECC_PARAMETER *from, uint8_t *to, size_t *len) {
    if (from->size > 66) return 0;
    memcpy(to, from->buffer, from->size);
    *len = from->size;
    return 1;
}

uint32_t aa_tpm_create(aa_tpm *tpm, uint8_t *blob, size_t blob_cap, size_t *blob_len,
                       uint8_t *x, size_t *x_len, uint8_t *y, size_t *y_len, int *stage) {
    *stage = AA_TPM_STAGE_PRIMARY;
    TSS2_RC rc = ensure_primary(tpm);
    if (rc != TSS2_RC_SUCCESS) return rc;
    *stage = AA_TPM_STAGE_CREATE;
    TPM2B_SENSITIVE_CREATE sensitive = {0};
    TPM2B_PUBLIC template = {
        .publicArea = {
            .type = TPM2_ALG_ECC,
            .nameAlg = TPM2_ALG_SHA256,
            .objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_SENSITIVEDATAORIGIN
                | TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_NODA | TPMA_OBJECT_SIGN_ENCRYPT,
            .parameters.eccDetail = {
                .symmetric = { .algorithm = TPM2_ALG_NULL },
                .scheme = { .scheme = TPM2_ALG_ECDSA, .details.ecdsa.hashAlg = TPM2_ALG_SHA256 },
                .curveID = TPM2_ECC_NIST_P256,
                .kdf = { .scheme = TPM2_ALG_NULL },
            },
        },
    };
    TPM2B_DATA outside = {0};
    TPML_PCR_SELECTION pcrs = {0};
    TPM2B_PRIVATE *private = NULL;
    TPM2B_PUBLIC *public = NULL;
    rc = Esys_Create(tpm->esys, tpm->primary, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &sensitive, &template,
                     &outside, &pcrs, &private, &public, NULL, NULL, NULL);
    if (rc != TSS2_RC_SUCCESS) return rc;
    *stage = AA_TPM_STAGE_BLOB;
    size_t offset = 0;
    rc = Tss2_MU_TPM2B_PUBLIC_Marshal(public, blob, blob_cap, &offset);
    if (rc == TSS2_RC_SUCCESS) rc = Tss2_MU_TPM2B_PRIVATE_Marshal(private, blob, blob_cap, &offset);
    if (rc == TSS2_RC_SUCCESS) {
        *blob_len = offset;
        if (!copy_point(&public->publicArea.unique.ecc.x, x, x_len)
            || !copy_point(&public->publicArea.unique.ecc.y, y, y_len)) {
            rc = TSS2_BASE_RC_MALFORMED_RESPONSE;
        }
    }
    AA_FREE(private);
    AA_FREE(public);
    return rc;
}

uint32_t aa_tpm_sign(aa_tpm *tpm, const uint8_t *blob, size_t blob_len, const uint8_t *digest,
                     uint8_t *r, size_t *r_len, uint8_t *s, size_t *s_len, int *stage) {
    *stage = AA_TPM_STAGE_BLOB;
    TPM2B_PUBLIC public = {0};
    TPM2B_PRIVATE private = {0};
    size_t offset = 0;
    TSS2_RC rc = Tss2_MU_TPM2B_PUBLIC_Unmarshal(blob, blob_len, &offset, &public);
    if (rc == TSS2_RC_SUCCESS) rc = Tss2_MU_TPM2B_PRIVATE_Unmarshal(blob, blob_len, &offset, &private);
    if (rc != TSS2_RC_SUCCESS) return rc;
    if (offset != blob_len) return TSS2_BASE_RC_BAD_VALUE;
    *stage = AA_TPM_STAGE_PRIMARY;
    rc = ensure_primary(tpm);
    if (rc != TSS2_RC_SUCCESS) return rc;
    *stage = AA_TPM_STAGE_LOAD;
    ESYS_TR key = ESYS_TR_NONE;
    rc = Esys_Load(tpm->esys, tpm->primary, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &private, &public, &key);
    if (rc != TSS2_RC_SUCCESS) return rc;
    *stage = AA_TPM_STAGE_SIGN;
    TPM2B_DIGEST message = { .size = 32 };
    memcpy(message.buffer, digest, 32);
    TPMT_SIG_SCHEME scheme = { .scheme = TPM2_ALG_ECDSA, .details.ecdsa.hashAlg = TPM2_ALG_SHA256 };
    /* A NULL ticket: allowed for a key that is not restricted. */
    TPMT_TK_HASHCHECK ticket = { .tag = TPM2_ST_HASHCHECK, .hierarchy = TPM2_RH_NULL };
    TPMT_SIGNATURE *signature = NULL;
    rc = Esys_Sign(tpm->esys, key, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &message, &scheme, &ticket, &signature);
    Esys_FlushContext(tpm->esys, key);
    if (rc != TSS2_RC_SUCCESS) return rc;
    if (signature->sigAlg != TPM2_ALG_ECDSA || !copy_point(&signature->signature.ecdsa.signatureR, r, r_len)
        || !copy_point(&signature->signature.ecdsa.signatureS, s, s_len)) {
        rc = TSS2_BASE_RC_MALFORMED_RESPONSE;
    }
    AA_FREE(signature);
    return rc;
}

const char *aa_tpm_rc_text(uint32_t rc) {
    return Tss2_RC_Decode(rc);
}
