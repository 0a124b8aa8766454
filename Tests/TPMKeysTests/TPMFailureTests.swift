@testable import TPMKeys
import AuthCore
import XCTest

/// What a TSS2 response code means for the caller (``TPMFailure``), as a table of codes tpm2-tss 3.2 returns (those
/// marked "seen" were read from swtpm and a missing device on this machine class), and what `tpm_tcti` says
/// without asking the TPM (``TPMPlace``). The real TPM: Tests/e2e/test_tpm.py against swtpm.
final class TPMFailureTests: XCTestCase {
    func testATPMThatRefusesToLoadTheKeyMeansAnotherTPMAndEverythingElseThatItDidNotAnswer() {
        let table: [(UInt32, TPMFailure.Stage, TPMFailure.Kind)] = [
            (0x0000_01DF, .load, .foreignKey),      // seen: parameter 1, integrity check failed (another TPM's blob)
            (0x0000_009C, .load, .foreignKey),      // TPM_RC_KEY
            (0x0000_01D5, .load, .foreignKey),      // parameter 1, TPM_RC_SIZE
            (0x0000_0902, .load, .unavailable),     // TPM_RC_OBJECT_MEMORY: a warning, the TPM is there but full
            (0x0000_0922, .load, .unavailable),     // TPM_RC_RETRY
            (0x000A_000A, .connect, .unavailable),  // seen: tcti IO failure (no swtpm, no /dev/tpmrm0)
            (0x000A_000A, .load, .unavailable),     // the simulator stopped between calls
            (0x000A_0015, .connect, .unavailable),  // seen: an unknown TCTI name
            (0x0007_000A, .sign, .unavailable),     // ESYS IO error
            (0x0000_0100, .primary, .unavailable),  // TPM_RC_INITIALIZE: the TPM was never started up
            (0x0000_098E, .primary, .unavailable),  // TPM_RC_LOCKOUT
            (0x0000_09A2, .primary, .unavailable),  // a BAD_AUTH-style refusal of the owner hierarchy is not "another TPM"
            (0x0009_000B, .blob, .unreadableKey),   // MU: the item's blob does not unmarshal
        ]
        for (code, stage, kind) in table {
            XCTAssertEqual(TPMFailure(code: code, stage: stage).kind, kind, String(code, radix: 16))
        }
    }

    func testTheErrorsSayWhatToDo() {
        let foreign = TPMFailure(code: 0x1DF, stage: .load).error(detail: "integrity check failed", place: "swtpm:port=1")
        XCTAssertEqual(foreign.code, .loginRequired)
        XCTAssertTrue(foreign.message.contains("belongs to another TPM"), foreign.message)
        XCTAssertTrue(foreign.message.contains("swtpm:port=1"))
        let gone = TPMFailure(code: 0xA000A, stage: .connect).error(detail: "tcti:IO failure", place: "device:/dev/tpmrm0")
        XCTAssertEqual(gone.code, .tpmUnavailable)
        XCTAssertTrue(gone.message.contains("no TPM answers at device:/dev/tpmrm0"), gone.message)
        XCTAssertEqual(TPMFailure(code: 0x98E, stage: .primary).error(detail: "x", place: "p").code, .tpmUnavailable)
    }

    func testTheDeviceATCTIOpensAndWhyItCannot() {
        XCTAssertEqual(TPMPlace(tcti: "device:/dev/tpmrm0").devicePath, "/dev/tpmrm0")
        XCTAssertEqual(TPMPlace(tcti: "device").devicePath, "/dev/tpm0")
        XCTAssertNil(TPMPlace(tcti: "swtpm:host=127.0.0.1,port=2321").devicePath)
        XCTAssertNil(TPMPlace(tcti: "swtpm:host=127.0.0.1,port=2321").deviceProblem())
        let missing = TPMPlace(tcti: "device:/nonexistent/tpmrm9").deviceProblem()
        XCTAssertTrue(missing?.contains("does not exist") ?? false, missing ?? "nil")
        // A file this user may not open stands for a device of another group.
        if getuid() != 0 {
            XCTAssertTrue(TPMPlace(tcti: "device:/etc/shadow").deviceProblem()?.contains("usermod -aG tss") ?? false)
        }
        XCTAssertNil(TPMPlace(tcti: "device:/dev/null").deviceProblem())
    }

    /// Nothing listens: the holder answers with tpm_unavailable within its deadline, and its check says so.
    func testATPMThatIsNotThereIsUnavailableAndSaidSo() async {
        let holder = TPMKeyHolder(tcti: "swtpm:host=127.0.0.1,port=9", timeout: .seconds(5))
        do {
            _ = try await holder.createKey()
            XCTFail("no TPM listens on port 9")
        } catch {
            XCTAssertEqual(error.code, .tpmUnavailable)
        }
        let check = await holder.check()
        XCTAssertEqual(check.problem?.code, .tpmUnavailable)
        XCTAssertEqual(check.place, "swtpm:host=127.0.0.1,port=9")
    }
}
