// Android-only helpers (they use android.* classes). Not compiled by kotlin-check.sh, which has no
// android.jar: reviewed, compiled only by an app's Gradle build. Everything they call
// (Model.fromFd, Model.fromBytes, Session.classify(IntArray, …)) is compiled and tested on the
// host JVM (SdkCheck.kt).
@file:JvmName("KestrelAndroid")

package dev.kestrel

import android.content.res.AssetManager
import android.graphics.Bitmap
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

/**
 * Classifies a [Bitmap]: its pixels as colour ints (`getPixels`: unpremultiplied, so an opaque
 * bitmap decoded from a PNG gives exactly `kestrel classify`'s result for that file) through
 * [Session.classify], preprocessed as the model records, the [k] most probable classes best first.
 * A bitmap in another config (RGB_565, HARDWARE, RGBA_F16…) is copied to ARGB_8888 first. Pass
 * [pixels] (at least `width × height` ints) to reuse one array between frames; otherwise one is
 * allocated per call. Scale large camera frames down first (`Bitmap.createScaledBitmap`): the
 * model's own resize runs on the CPU over every source row.
 *
 * Kotlin: `session.classify(bitmap, 3)`; Java: `KestrelAndroid.classify(session, bitmap, 3)`.
 */
@JvmOverloads
fun Session.classify(bitmap: Bitmap, k: Int = 1, pixels: IntArray? = null): List<Classification> {
    val src = if (bitmap.config == Bitmap.Config.ARGB_8888) {
        bitmap
    } else {
        bitmap.copy(Bitmap.Config.ARGB_8888, false)
            ?: throw KestrelException(KestrelException.UNSUPPORTED, "cannot copy a ${bitmap.config} bitmap to ARGB_8888")
    }
    try {
        val w = src.width
        val h = src.height
        val buf = if (pixels != null && pixels.size >= w * h) pixels else IntArray(w * h)
        src.getPixels(buf, 0, w, 0, 0, w, h)
        return classify(buf, w, h, w, k)
    } finally {
        if (src !== bitmap) src.recycle()
    }
}
