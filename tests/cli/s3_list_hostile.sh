# A listing that never ends (found by review): an S3 endpoint that answers
# every ListObjectsV2 page "truncated" makes `larder index --files
# s3://...` fail in a moment with a message, instead of asking for page
# after page forever (keeping every name): the same token again, page
# after page without a key, or pages that do not move past the keys
# already listed.  The endpoint is tests/tools/hostile_http.py, unsigned
# (it ignores the signature).  Before the fix each ran until killed.
source "$(dirname "$0")/lib.sh"
mkdir www
start_hostile_http www
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_DEFAULT_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 \
  LARDER_S3_ADDRESSING
export AWS_ACCESS_KEY_ID=KEY AWS_SECRET_ACCESS_KEY=SECRET AWS_REGION=us-east-1
export AWS_SHARED_CREDENTIALS_FILE=$WORK/none LARDER_S3_ENDPOINT=$hostile_base

# mode, the message, the most pages it may ask for
check() {
  echo "$1" >www/s3mode
  local status=0 before
  before=$(cat www/requests 2>/dev/null || echo 0)
  timeout 20 "$LARDER" index --files s3://bucket/p/ -o x.larder >out.txt 2>err.txt || status=$?
  [ $status -eq 1 ] || fail "$1: exited $status (124: still listing after 20 s): $(cat err.txt)"
  grep -qF -- "$2" err.txt || fail "$1: the message lacks '$2': $(cat err.txt)"
  local asked=$(($(cat www/requests) - before))
  [ $asked -le "$3" ] || fail "$1: $asked pages asked for"
}
check same-token "S3 listing: the same continuation token twice: the listing does not advance" 2
check no-keys "S3 listing: 33 truncated pages in a row without a key: the listing does not advance" 33
check repeat "S3 listing: a page starts at 'k1', not after 'k2' listed before it: the listing does not advance" 2
echo ok
