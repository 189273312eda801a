#!/usr/bin/env bash
# Mints an HS256 JWT for local tries of order-service with end-user identity on:
#
#   export AUTH_JWT_SECRET='a local secret of at least 32 bytes....'
#   scripts/mint-token.sh 42            # a token of user 42, valid for an hour
#   TTL_SECS=60 scripts/mint-token.sh 42
#
# The same AUTH_JWT_SECRET (and AUTH_JWT_ISSUER / AUTH_JWT_AUDIENCE when set) must be in
# order-service's environment. Prints the token alone, for `-H "Authorization: Bearer $(...)"`.
# Needs only openssl and coreutils. A real deployment gets its tokens from its identity
# provider instead; this is for trying the API by hand.
set -euo pipefail

user="${1:?usage: $0 USER_ID   (a positive integer)}"
[[ "$user" =~ ^[1-9][0-9]*$ ]] || { echo "the user id must be a positive integer" >&2; exit 2; }
: "${AUTH_JWT_SECRET:?set AUTH_JWT_SECRET to the secret order-service verifies with}"
ttl="${TTL_SECS:-3600}"

b64url() { base64 -w0 | tr '+/' '-_' | tr -d '='; }

now="$(date +%s)"
claims="{\"sub\":\"$user\",\"iat\":$now,\"exp\":$((now + ttl))"
[[ -n "${AUTH_JWT_ISSUER:-}" ]] && claims+=",\"iss\":\"$AUTH_JWT_ISSUER\""
[[ -n "${AUTH_JWT_AUDIENCE:-}" ]] && claims+=",\"aud\":\"$AUTH_JWT_AUDIENCE\""
claims+="}"

signed="$(printf '%s' '{"alg":"HS256","typ":"JWT"}' | b64url).$(printf '%s' "$claims" | b64url)"
signature="$(printf '%s' "$signed" | openssl dgst -sha256 -binary -hmac "$AUTH_JWT_SECRET" | b64url)"
printf '%s.%s\n' "$signed" "$signature"
