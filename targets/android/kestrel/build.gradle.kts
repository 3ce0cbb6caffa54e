// The Kestrel Android library module. Add it to an app with `include(":kestrel")` in
// settings.gradle.kts (projectDir pointing here) and `implementation(project(":kestrel"))`.
// The native libraries come from `targets/android/build-android.sh`, which writes
// src/main/jniLibs/<abi>/libkestrel_jni.so for every ABI below.
plugins {
    id("com.android.library") version "8.5.2"
    id("org.jetbrains.kotlin.android") version "2.0.21"
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
