import AuthCore

/// What a failed TPM call means for the caller, from its TSS2 response code and the step it failed at (pure, so it is
/// tested as a table): the TPM did not answer (`tpm_unavailable`; the sign-in is kept), or it answered and will not
/// load the key (`login_required`: a key another TPM made, or this one before it was cleared).
struct TPMFailure: Equatable {
    /// The step of a call (`aa_tpm_stage` in agent_tpm.h).
    enum Stage: Int32 {
        case connect = 1, primary, create, load, sign, blob
    }

    enum Kind: Equatable {
        /// No answer: no TPM, no permission, a stopped simulator, a busy TPM. Worth trying again later.
        case unavailable
        /// The TPM answered and refused to load the key: it was not made by this TPM.
        case foreignKey
        /// The key in the keyring item is not a key at all (someone edited it).
        case unreadableKey
    }

    let code: UInt32
    let stage: Stage

    /// The TPM itself answered (the response code's layer is the TPM's, 0), as opposed to the stack failing on the
    /// way there (TCTI 0x0A, ESYS 0x07, ...).
    var fromTPM: Bool { code & 0xFF_0000 == 0 }

    /// A TPM warning (format 0, `TPM_RC_WARN` 0x900: busy, retry, out of object memory, ...): the TPM is there but
    /// cannot do it now.
    var isWarning: Bool { fromTPM && code & 0x80 == 0 && code & 0x900 == 0x900 }

    var kind: Kind {
        switch stage {
        case .blob: return .unreadableKey
        case .load where fromTPM && !isWarning: return .foreignKey
        default: return .unavailable
        }
    }

    /// The error for the caller: `detail` is tpm2-tss's words for ``code``, `place` the TCTI asked.
    func error(detail: String, place: String) -> AuthError {
        switch kind {
        case .foreignKey:
            return AuthError(.loginRequired, "the account's DPoP key belongs to another TPM (or to this one before it was cleared): the TPM at \(place) will not load it (\(detail)); sign in again to make a key in this TPM")
        case .unreadableKey:
            return AuthError(.loginRequired, "the keyring item's TPM-held DPoP key cannot be read (\(detail)); the account needs a new sign-in")
        case .unavailable:
            switch stage {
            case .connect: return AuthError(.tpmUnavailable, "no TPM answers at \(place) (\(detail))")
            case .primary: return AuthError(.tpmUnavailable, "the TPM at \(place) will not make its storage key under the owner hierarchy (\(detail)); an owner password set on the TPM stops it")
            default: return AuthError(.tpmUnavailable, "the TPM at \(place) failed (\(detail))")
            }
        }
    }
}
