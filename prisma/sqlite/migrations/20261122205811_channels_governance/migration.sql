-- CreateTable
CREATE TABLE "DeliveryPart" (
    "key" TEXT NOT NULL,
    "part" INTEGER NOT NULL,
    "status" TEXT NOT NULL,
    "externalId" TEXT,
    "updatedAt" DATETIME NOT NULL,

    PRIMARY KEY ("key", "part")
);

-- CreateTable
CREATE TABLE "ProgressPanel" (
    "turnId" TEXT NOT NULL PRIMARY KEY,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "externalId" TEXT,
    "text" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "updatedAt" DATETIME NOT NULL
);

-- CreateTable
CREATE TABLE "Identity" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "name" TEXT NOT NULL,
    "role" TEXT NOT NULL,
    "createdBy" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL
);

-- CreateTable
CREATE TABLE "PlatformAccount" (
    "platform" TEXT NOT NULL,
    "userId" TEXT NOT NULL,
    "identityId" TEXT NOT NULL,
    "displayName" TEXT,
    "dmChatId" TEXT,
    "dmAccount" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,

    PRIMARY KEY ("platform", "userId"),
    CONSTRAINT "PlatformAccount_identityId_fkey" FOREIGN KEY ("identityId") REFERENCES "Identity" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateTable
CREATE TABLE "Binding" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "name" TEXT,
    "mode" TEXT NOT NULL DEFAULT 'mention',
    "model" TEXT,
    "adminChannel" BOOLEAN NOT NULL DEFAULT false,
    "createdBy" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- CreateTable
CREATE TABLE "Pairing" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "tokenHash" TEXT NOT NULL,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "userId" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "displayName" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "role" TEXT,
    "expiresAt" DATETIME NOT NULL,
    "decidedBy" TEXT,
    "decidedAt" DATETIME,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- CreateTable
CREATE TABLE "Approval" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "workflowId" TEXT NOT NULL,
    "runId" TEXT,
    "sessionId" TEXT NOT NULL,
    "turnId" TEXT NOT NULL,
    "toolCallId" TEXT NOT NULL,
    "tool" TEXT NOT NULL,
    "summary" TEXT NOT NULL,
    "payload" TEXT NOT NULL,
    "risk" TEXT NOT NULL,
    "requestedBy" TEXT,
    "status" TEXT NOT NULL,
    "decidedBy" TEXT,
    "reason" TEXT,
    "deadline" DATETIME NOT NULL,
    "decidedAt" DATETIME,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- CreateTable
CREATE TABLE "ApprovalNotice" (
    "approvalId" TEXT NOT NULL,
    "deliveryKey" TEXT NOT NULL,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,

    PRIMARY KEY ("approvalId", "deliveryKey")
);

-- CreateTable
CREATE TABLE "ShellToken" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "name" TEXT NOT NULL,
    "tokenHash" TEXT NOT NULL,
    "identityId" TEXT NOT NULL,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "revokedAt" DATETIME
);

-- CreateTable
CREATE TABLE "ShellContinuation" (
    "tokenHash" TEXT NOT NULL PRIMARY KEY,
    "shellId" TEXT NOT NULL,
    "sessionId" TEXT NOT NULL,
    "afterSeq" INTEGER NOT NULL,
    "expiresAt" DATETIME NOT NULL,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);

-- RedefineTables
PRAGMA defer_foreign_keys=ON;
PRAGMA foreign_keys=OFF;
CREATE TABLE "new_Delivery" (
    "key" TEXT NOT NULL PRIMARY KEY,
    "sessionId" TEXT NOT NULL,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL DEFAULT 'default',
    "chatId" TEXT NOT NULL,
    "kind" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "attempts" INTEGER NOT NULL DEFAULT 0,
    "messageSeq" INTEGER,
    "externalId" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "sentAt" DATETIME
);
INSERT INTO "new_Delivery" ("attempts", "chatId", "createdAt", "externalId", "key", "kind", "messageSeq", "platform", "sentAt", "sessionId", "status") SELECT "attempts", "chatId", "createdAt", "externalId", "key", "kind", "messageSeq", "platform", "sentAt", "sessionId", "status" FROM "Delivery";
DROP TABLE "Delivery";
ALTER TABLE "new_Delivery" RENAME TO "Delivery";
CREATE INDEX "Delivery_sessionId_createdAt_idx" ON "Delivery"("sessionId", "createdAt");
CREATE TABLE "new_Message" (
    "seq" INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
    "key" TEXT NOT NULL,
    "sessionId" TEXT NOT NULL,
    "role" TEXT NOT NULL,
    "text" TEXT NOT NULL,
    "user" TEXT,
    "identityId" TEXT,
    "command" BOOLEAN NOT NULL DEFAULT false,
    "attachments" TEXT,
    "turnId" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
);
INSERT INTO "new_Message" ("createdAt", "key", "role", "seq", "sessionId", "text", "turnId", "user") SELECT "createdAt", "key", "role", "seq", "sessionId", "text", "turnId", "user" FROM "Message";
DROP TABLE "Message";
ALTER TABLE "new_Message" RENAME TO "Message";
CREATE UNIQUE INDEX "Message_key_key" ON "Message"("key");
CREATE INDEX "Message_sessionId_seq_idx" ON "Message"("sessionId", "seq");
CREATE INDEX "Message_identityId_createdAt_idx" ON "Message"("identityId", "createdAt");
PRAGMA foreign_keys=ON;
PRAGMA defer_foreign_keys=OFF;

-- CreateIndex
CREATE INDEX "PlatformAccount_identityId_idx" ON "PlatformAccount"("identityId");

-- CreateIndex
CREATE UNIQUE INDEX "Binding_platform_account_chatId_key" ON "Binding"("platform", "account", "chatId");

-- CreateIndex
CREATE UNIQUE INDEX "Pairing_tokenHash_key" ON "Pairing"("tokenHash");

-- CreateIndex
CREATE INDEX "Pairing_platform_userId_createdAt_idx" ON "Pairing"("platform", "userId", "createdAt");

-- CreateIndex
CREATE INDEX "Approval_status_createdAt_idx" ON "Approval"("status", "createdAt");

-- CreateIndex
CREATE UNIQUE INDEX "Approval_turnId_toolCallId_key" ON "Approval"("turnId", "toolCallId");

-- CreateIndex
CREATE UNIQUE INDEX "ShellToken_name_key" ON "ShellToken"("name");

-- CreateIndex
CREATE UNIQUE INDEX "ShellToken_tokenHash_key" ON "ShellToken"("tokenHash");
