import AuthCore
import Glibc

/// What can be said about `tpm_tcti` without asking the TPM: for the kernel's device, whether it exists and whether
/// this user may open it (the resource manager `/dev/tpmrm0` is group `tss`, mode 0660 on Debian).
struct TPMPlace: Equatable {
    let tcti: String

    /// The device a `device:PATH` TCTI opens (`device` alone: tpm2-tss's default, /dev/tpm0); nil for other TCTIs.
    var devicePath: String? {
        if tcti == "device" { return "/dev/tpm0" }
        guard tcti.hasPrefix("device:") else { return nil }
        let path = String(tcti.dropFirst("device:".count))
        return path.isEmpty ? "/dev/tpm0" : path
    }

    /// Why the device cannot be opened, when that is the reason: nil when it can, or when this is no device TCTI.
    func deviceProblem() -> String? {
        guard let path = devicePath else { return nil }
        if access(path, F_OK) != 0 {
            return "\(path) does not exist: this machine has no TPM, or its driver is not loaded (or set [agent] tpm_tcti)"
        }
        if access(path, R_OK | W_OK) != 0 {
            return "\(path) is there but you may not open it: add yourself to its group (`sudo usermod -aG tss $USER`, then log in again)"
        }
        return nil
    }
}
