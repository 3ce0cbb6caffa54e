// Android-only helpers (they use android.* classes). Not compiled by kotlin-check.sh, which has no
// android.jar: reviewed, compiled only by an app's Gradle build. Everything they call
// (Model.fromFd, Model.fromBytes) is compiled and tested on the host JVM.
@file:JvmName("KestrelAndroid")

package dev.kestrel

import android.content.res.AssetManager
import java.io.FileNotFoundException

/**
 * Loads the model asset [name] from the APK, memory-mapped in place when the asset is stored
 * uncompressed (add `androidResources { noCompress += "kes" }` to the app's Gradle build; the APK
 * then holds it as is, and an offset that is a multiple of 64 — `zipalign -p` aligns to 4, so this
 * holds only by chance or with a 64-byte-aligned packaging step — maps without a copy, any other
 * offset is read once). A compressed asset cannot be mapped (`openFd` throws
 * FileNotFoundException): it is read and copied instead. `Model.storage` says which happened.
 *
 * Kotlin: `Model.load(context.assets, "model.kes")`; Java:
 * `KestrelAndroid.load(Model.Companion, context.getAssets(), "model.kes")`.
 */
fun Model.Companion.load(assets: AssetManager, name: String): Model {
    val afd = try {
        assets.openFd(name)
    } catch (_: FileNotFoundException) {
        // Compressed in the APK (or not an asset at all: then open() throws the real error).
        return assets.open(name).use { Model.fromBytes(it.readBytes()) }
    }
    // The native side duplicates the descriptor it maps, so closing ours at once is fine.
    return afd.use { Model.fromFd(it.parcelFileDescriptor.fd, it.startOffset, it.length) }
}
