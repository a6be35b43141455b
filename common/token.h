#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpubroker {

/// A session token: 128 random bits.
using Token = std::array<uint8_t, 16>;

/// Draws a token from the kernel's CSPRNG (getrandom).
Token RandomToken();

/// 32 lowercase hex digits.
std::string TokenToHex(const Token& token);

/// Parses 32 hex digits; std::nullopt otherwise.
std::optional<Token> TokenFromHex(std::string_view hex);

/// Metadata key that carries the token on every gRPC call.
inline constexpr const char* kTokenMetadataKey = "gpubroker-token";

}  // namespace gpubroker
