// The Kestrel Android library module. Add it to an app with `include(":kestrel")` in
// settings.gradle.kts (projectDir pointing here) and `implementation(project(":kestrel"))`.
// The native libraries come from `targets/android/build-android.sh`, which writes
// src/main/jniLibs/<abi>/libkestrel_jni.so for every ABI below. (Without Gradle:
// `targets/android/build-aar.sh` packs the same sources and libraries into an AAR.)
//
// No plugin versions here: the app's build resolves them, so the module builds with the app's own
// Android Gradle Plugin and Kotlin versions instead of forcing others on it. The app declares both
// plugins once, e.g. in its root build.gradle.kts:
//     plugins {
//         id("com.android.application") version "8.7.3" apply false
//         id("com.android.library") version "8.7.3" apply false      // the same AGP version
//         id("org.jetbrains.kotlin.android") version "2.2.0" apply false
//     }
// (or `alias(libs.plugins.…) apply false` from its version catalog, or pluginManagement in
// settings.gradle.kts). Needs AGP 8.0+ (`namespace`) and Kotlin 2.2+ (the sources are compiled at
// language version 2.2 by build-aar.sh; kotlin-check.sh compiles them with kotlinc 2.4.20).
// docs/android.md.
plugins {
    id("com.android.library")
    id("org.jetbrains.kotlin.android")
}

android {
    namespace = "dev.kestrel"
    compileSdk = 34

    defaultConfig {
        minSdk = 24
        ndk {
            abiFilters += listOf("arm64-v8a", "armeabi-v7a", "x86_64")
        }
        consumerProguardFiles("consumer-rules.pro")
    }

    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }

    sourceSets["main"].jniLibs.srcDirs("src/main/jniLibs")
}

kotlin {
    jvmToolchain(17)
}
