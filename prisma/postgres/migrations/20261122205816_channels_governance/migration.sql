-- AlterTable
ALTER TABLE "Delivery" ADD COLUMN     "account" TEXT NOT NULL DEFAULT 'default';

-- AlterTable
ALTER TABLE "Message" ADD COLUMN     "attachments" TEXT,
ADD COLUMN     "command" BOOLEAN NOT NULL DEFAULT false,
ADD COLUMN     "identityId" TEXT;

-- CreateTable
CREATE TABLE "DeliveryPart" (
    "key" TEXT NOT NULL,
    "part" INTEGER NOT NULL,
    "status" TEXT NOT NULL,
    "externalId" TEXT,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "DeliveryPart_pkey" PRIMARY KEY ("key","part")
);

-- CreateTable
CREATE TABLE "ProgressPanel" (
    "turnId" TEXT NOT NULL,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "externalId" TEXT,
    "text" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "ProgressPanel_pkey" PRIMARY KEY ("turnId")
);

-- CreateTable
CREATE TABLE "Identity" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "role" TEXT NOT NULL,
    "createdBy" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" TIMESTAMP(3) NOT NULL,

    CONSTRAINT "Identity_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "PlatformAccount" (
    "platform" TEXT NOT NULL,
    "userId" TEXT NOT NULL,
    "identityId" TEXT NOT NULL,
    "displayName" TEXT,
    "dmChatId" TEXT,
    "dmAccount" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "PlatformAccount_pkey" PRIMARY KEY ("platform","userId")
);

-- CreateTable
CREATE TABLE "Binding" (
    "id" TEXT NOT NULL,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "name" TEXT,
    "mode" TEXT NOT NULL DEFAULT 'mention',
    "model" TEXT,
    "adminChannel" BOOLEAN NOT NULL DEFAULT false,
    "createdBy" TEXT,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "Binding_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Pairing" (
    "id" TEXT NOT NULL,
    "tokenHash" TEXT NOT NULL,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "userId" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,
    "displayName" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "role" TEXT,
    "expiresAt" TIMESTAMP(3) NOT NULL,
    "decidedBy" TEXT,
    "decidedAt" TIMESTAMP(3),
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "Pairing_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "Approval" (
    "id" TEXT NOT NULL,
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
    "deadline" TIMESTAMP(3) NOT NULL,
    "decidedAt" TIMESTAMP(3),
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "Approval_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "ApprovalNotice" (
    "approvalId" TEXT NOT NULL,
    "deliveryKey" TEXT NOT NULL,
    "platform" TEXT NOT NULL,
    "account" TEXT NOT NULL,
    "chatId" TEXT NOT NULL,

    CONSTRAINT "ApprovalNotice_pkey" PRIMARY KEY ("approvalId","deliveryKey")
);

-- CreateTable
CREATE TABLE "ShellToken" (
    "id" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "tokenHash" TEXT NOT NULL,
    "identityId" TEXT NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "revokedAt" TIMESTAMP(3),

    CONSTRAINT "ShellToken_pkey" PRIMARY KEY ("id")
);

-- CreateTable
CREATE TABLE "ShellContinuation" (
    "tokenHash" TEXT NOT NULL,
    "shellId" TEXT NOT NULL,
    "sessionId" TEXT NOT NULL,
    "afterSeq" INTEGER NOT NULL,
    "expiresAt" TIMESTAMP(3) NOT NULL,
    "createdAt" TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP,

    CONSTRAINT "ShellContinuation_pkey" PRIMARY KEY ("tokenHash")
);

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

-- CreateIndex
CREATE INDEX "Message_identityId_createdAt_idx" ON "Message"("identityId", "createdAt");

-- AddForeignKey
ALTER TABLE "PlatformAccount" ADD CONSTRAINT "PlatformAccount_identityId_fkey" FOREIGN KEY ("identityId") REFERENCES "Identity"("id") ON DELETE CASCADE ON UPDATE CASCADE;
